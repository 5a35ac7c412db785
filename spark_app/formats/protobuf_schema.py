"""Protobuf descriptors from registered `.proto` source text, built at run time.

The registry keeps a Protobuf schema as `.proto` source (schemaType PROTOBUF), with
`references` for the files it imports. Descriptors come from **protoc itself**, the one
bundled as a Python extension in `grpcio-tools` (no binary download, one wheel per
platform): the schema and every file it references (fetched from the registry by subject
and version, recursively) are written to a temporary directory and compiled to a
FileDescriptorSet with `--include_imports`; Google's well-known imports
(`google/protobuf/timestamp.proto` …) come from the `.proto` files grpcio-tools ships.
Why protoc and not a pure-Python `.proto` parser: a parser gives a syntax tree, and turning
that into descriptors (name scoping and resolution, map entries, `optional`'s synthetic
oneofs, editions' features, options) is exactly the compiler's job; protoc is the reference
implementation, so a schema means here what it means to the producer that wrote it.

protoc runs in a child process (`python -m grpc_tools.protoc`): its errors go to its stderr,
which becomes the error message, and a compiler crash cannot take a Spark worker down. It
runs once per schema: on the driver for the reader schema (whose FileDescriptorSet then
travels, serialized, to the executors), on an executor once per writer schema id.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from google.protobuf import descriptor_pb2

from spark_app.formats.schema_registry_client import (
    RegisteredSchema,
    SchemaNotFound,
    SchemaRegistryClient,
)

_PROTOC_TIMEOUT_S = 60.0


class ProtobufSchemaError(ValueError):
    """A registered Protobuf schema that cannot be compiled (its text, or its references)."""


@dataclass(frozen=True)
class CompiledSchema:
    """A schema's FileDescriptorSet (its imports first, the schema's own file last)."""

    descriptor_set: bytes  # serialized: hashable, and what pickles to the executors

    def files(self) -> list[descriptor_pb2.FileDescriptorProto]:
        return list(descriptor_pb2.FileDescriptorSet.FromString(self.descriptor_set).file)

    def main_file(self) -> descriptor_pb2.FileDescriptorProto:
        return self.files()[-1]


def compile_schema(client: SchemaRegistryClient | None, schema: RegisteredSchema) -> CompiledSchema:
    """`schema` and its references compiled by protoc; raises ProtobufSchemaError. Without a
    `client` (a schema given inline) it can import only Google's well-known types."""
    sources = {main_file_name(schema): schema.schema}
    _add_references(client, schema, sources, seen=set())
    return CompiledSchema(_protoc(sources, main_file_name(schema)))


def main_file_name(schema: RegisteredSchema) -> str:
    """The name the schema's own file gets (the registry gives none; imports name the others)."""
    return f"streamingjob-schema-{schema.schema_id or 'inline'}.proto"


def _add_references(
    client: SchemaRegistryClient | None,
    schema: RegisteredSchema,
    sources: dict[str, str],
    seen: set[tuple[str, int]],
) -> None:
    """Every file `schema` imports through the registry, by its import path, into `sources`."""
    for ref in schema.references:
        if (ref.subject, ref.version) in seen:
            continue
        seen.add((ref.subject, ref.version))
        _check_import_path(ref.name)
        if client is None:
            raise ProtobufSchemaError(f"it imports {ref.name!r} by reference, with no registry")
        try:
            imported = client.subject_version(ref.subject, ref.version)
        except SchemaNotFound:
            raise ProtobufSchemaError(
                f"it imports {ref.name!r} as subject {ref.subject!r} version {ref.version}, "
                "which the registry does not have"
            ) from None
        sources[ref.name] = imported.schema
        _add_references(client, imported, sources, seen)


def _check_import_path(name: str) -> None:
    """A reference's name becomes a file path under the compile directory: no way out of it."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not name.endswith(".proto"):
        raise ProtobufSchemaError(f"reference name {name!r} is not a relative .proto import path")


def _protoc(sources: dict[str, str], main: str) -> bytes:
    """The FileDescriptorSet protoc writes for `main`, with all it imports."""
    with tempfile.TemporaryDirectory(prefix="streamingjob-proto-") as tmp:
        root = Path(tmp) / "src"
        for name, text in sources.items():
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        out = Path(tmp) / "set.pb"
        command = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--proto_path={root}",
            f"--proto_path={_well_known_dir()}",
            "--include_imports",
            f"--descriptor_set_out={out}",
            main,
        ]
        try:
            done = subprocess.run(
                command, cwd=root, capture_output=True, text=True, timeout=_PROTOC_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            raise ProtobufSchemaError(f"protoc did not finish in {_PROTOC_TIMEOUT_S:g}s") from None
        if done.returncode != 0:
            errors = (done.stderr or done.stdout).strip().replace(str(root) + "/", "")
            raise ProtobufSchemaError(f"protoc: {errors}")
        return out.read_bytes()


def _well_known_dir() -> str:
    """Where grpcio-tools keeps google/protobuf/*.proto (timestamp, wrappers, …)."""
    import grpc_tools

    return str(Path(grpc_tools.__file__).parent / "_proto")


def message_names(file: descriptor_pb2.FileDescriptorProto) -> list[str]:
    """The full names of a file's top-level messages, in order."""
    prefix = f"{file.package}." if file.package else ""
    return [prefix + m.name for m in file.message_type]


def message_at(file: descriptor_pb2.FileDescriptorProto, indexes: list[int]) -> str | None:
    """The full name of the message that Confluent's message indexes point at in `file` (the
    first index among the top-level messages, each next one among the nested messages of the
    one before), or None where there is no such message. The messages counted are those the
    source declares: protoc's synthetic map-entry messages are not (Confluent's serializer
    counts the declared ones: it indexes the parsed source, or skips map entries)."""
    name = file.package
    messages = list(file.message_type)
    for index in indexes:
        if index >= len(messages):
            return None
        name = f"{name}.{messages[index].name}" if name else messages[index].name
        messages = [m for m in messages[index].nested_type if not m.options.map_entry]
    return name if indexes else None

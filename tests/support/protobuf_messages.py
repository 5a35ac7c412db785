"""What a test producer of Protobuf records does: message classes built at test time from
`.proto` text (protoc in-process, a descriptor pool of their own, so two versions of one
message coexist), and values in the Confluent wire format as Confluent's serializer writes
them. Independent of spark_app's own compile and parse path, which the tests check."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def message_classes(files: dict[str, str], main: str) -> dict[str, Any]:
    """{full name: message class} of every message `main` defines (nested ones too), with
    `files` ({import path: text}) its source and the files it imports."""
    from grpc_tools import protoc

    well_known = Path(protoc.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / name).write_text(text)
        out = Path(tmp) / "set.pb"
        args = ["protoc", f"-I{tmp}", f"-I{well_known}", "--include_imports"]
        assert protoc.main([*args, f"--descriptor_set_out={out}", main]) == 0, main
        descriptor_set = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_set.file:
        pool.AddSerializedFile(file.SerializeToString())
    classes: dict[str, Any] = {}
    pending = list(pool.FindFileByName(main).message_types_by_name.values())
    while pending:
        descriptor = pending.pop()
        classes[descriptor.full_name] = message_factory.GetMessageClass(descriptor)
        pending.extend(descriptor.nested_types)
    return classes


def zigzag_varint(n: int) -> bytes:
    raw = (n << 1) ^ (n >> 31)
    out = bytearray()
    while True:
        if raw <= 0x7F:
            out.append(raw)
            return bytes(out)
        out.append(raw & 0x7F | 0x80)
        raw >>= 7


def proto_wire_format(schema_id: int, message: Any, indexes: list[int] | None = None) -> bytes:
    """Magic byte 0, the schema id (4 bytes, big-endian), the message indexes (a count then
    each index, zigzag varints; [0] as the one byte 0, the serializer's shorthand), then the
    message's Protobuf encoding."""
    header = struct.pack(">bI", 0, schema_id)
    if indexes is None or indexes == [0]:
        index_bytes = b"\x00"
    else:
        index_bytes = b"".join(zigzag_varint(n) for n in [len(indexes), *indexes])
    return header + index_bytes + message.SerializeToString()

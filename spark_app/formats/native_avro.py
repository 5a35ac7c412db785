"""Avro values decoded in Rust (native/src/avro.rs): a batch's whole value (or key) column,
the column the Python decoder gives, several times faster (bench/decode_bench.py).

The registry stays here: a writer schema id the Rust decoder has not met yet comes back as
`UnknownSchemaId`, is fetched by the `WireDecoder` as always (once per id, cached) and handed
over. Poison stays here too: a batch with any value the Rust decoder cannot decode (bad
header, a truncated or malformed payload, an id that is not registered or does not resolve)
comes back as None, and the Python decoder decodes that batch and names the reasons. A reader
schema whose column the Rust decoder cannot give exactly (a uuid, a union the mapping does
not know) is decided at construction: its values decode in Python, logged once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from spark_app.formats import native_module
from spark_app.formats.schema_registry_client import RegisteredSchema, RegistryUnavailable

log = logging.getLogger(__name__)

WriterText = Callable[[int], "str | None"]  # schema id -> its Avro JSON, None: poison
_logged: set[str] = set()


def _log_once(message: str, *args: Any) -> None:
    line = message % args
    if line not in _logged:  # a worker decodes many batches of one reader schema
        _logged.add(line)
        log.info(line)


class NativeAvro:
    """The Rust decoder of one reader schema's values."""

    def __init__(self, values: Any, native: Any):
        self._values = values
        self._native = native

    def decode(self, column: Any, writer_text: WriterText) -> Any:
        """`column` (binary wire-format values) decoded as a pyarrow array, or None: the
        Python decoder decodes this batch (and names any poison)."""
        import pyarrow as pa

        native = self._native
        while True:
            try:
                exported = self._values.decode(column._export_to_c)
            except native.UnknownSchemaId as exc:
                if not self._learn(exc.args[0], writer_text):
                    return None
                continue
            except native.AvroFallback:
                return None
            return pa.Array._import_from_c(exported.array_address, exported.schema_address)

    def _learn(self, schema_id: int, writer_text: WriterText) -> bool:
        """Hands over the writer schema of `schema_id`; False on a registry outage (the
        Python path then fetches again and names the record it stops at)."""
        try:
            text = writer_text(schema_id)
        except RegistryUnavailable:
            return False
        if text is None:
            self._values.refuse(schema_id)
        elif not self._values.add_writer(schema_id, text):
            _log_once(
                "Avro schema id %d resolves in Python only: its records decode there", schema_id
            )
        return True


def for_reader(reader: RegisteredSchema, column_type: Any) -> NativeAvro | None:
    """The Rust decoder of `reader`'s values, or None: they decode in Python (logged once
    per worker and reader schema, with why)."""
    from pyspark.sql.pandas.types import to_arrow_type

    name = f"id {reader.schema_id}" if reader.schema_id is not None else "valueSchema"
    native = native_module.module()
    if native is None or not hasattr(native, "AvroValues"):
        _log_once("Avro values (reader schema %s) decode in Python: no native decoder", name)
        return None
    arrow_type = to_arrow_type(column_type, timezone="UTC")
    try:
        values = native.AvroValues(reader.schema, arrow_type._export_to_c)
    except native.AvroUnsupported as exc:
        _log_once("Avro values (reader schema %s) decode in Python: %s", name, exc)
        return None
    _log_once("Avro values (reader schema %s) decode in Rust (native/src/avro.rs)", name)
    return NativeAvro(values, native)

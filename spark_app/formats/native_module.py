"""The native extension (`streamingjob_native`, native/, Rust), loaded once per process.

Two layers use it: the Avro decoder here (`native_avro`) and the read path
(`spark_app.source.native_read`), which also says why it did not load (`unavailable_reason`).
"""

from __future__ import annotations

from functools import lru_cache
from types import ModuleType

unavailable_reason: list[str] = []  # why the import failed, the newest last


@lru_cache(maxsize=1)
def module() -> ModuleType | None:
    """The native module, or None when it is not installed or does not load."""
    try:
        import streamingjob_native
    except ImportError as exc:
        unavailable_reason.append(str(exc))
        return None
    return streamingjob_native

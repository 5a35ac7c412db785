"""Adds compiled bytecode to the installed pyspark's `python/lib/pyspark.zip`, in place, once.

    <venv>/bin/python scripts/pyspark_zip_bytecode.py

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` first on the path of every Python process it
starts (executors' workers, the driver's per-query Python data source runners), and modules
imported from a zip without bytecode are compiled again by every such process: ~0.5 s of CPU
each on the reference machine, paid on the way to a query's first batch. Unchecked hash-based
.pyc files (PEP 552) next to each .py let zipimport load the compiled code without comparing
timestamps (a zip stores them at 2 s resolution); the sources stay for tracebacks. The zip
belongs to a pip-installed pyspark, which is never changed in place (a new pin is a new
environment), so the bytecode cannot go stale.
"""

from __future__ import annotations

import importlib.util
import os
import py_compile
import sys
import tempfile
import warnings
import zipfile


def pyspark_zip() -> str:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise SystemExit("pyspark is not installed in this Python environment")
    return os.path.join(os.path.dirname(spec.origin), "python", "lib", "pyspark.zip")


def add_bytecode(path: str) -> int:
    """Rewrites the zip with a .pyc beside every .py; returns how many were added (0 when
    the zip has bytecode already)."""
    with zipfile.ZipFile(path) as source:
        entries = source.infolist()
        if any(e.filename.endswith(".pyc") for e in entries):
            return 0
        with tempfile.TemporaryDirectory() as work:
            source.extractall(work)
            partial = f"{path}.partial"
            added = 0
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as target:
                for entry in entries:
                    target.writestr(entry, source.read(entry))
                    if not entry.filename.endswith(".py"):
                        continue
                    compiled = os.path.join(work, entry.filename + "c")
                    with warnings.catch_warnings():  # pyspark's own tests have a few
                        warnings.simplefilter("ignore", SyntaxWarning)
                        py_compile.compile(
                            os.path.join(work, entry.filename),
                            cfile=compiled,
                            # tracebacks name the file where zipimport finds the source
                            dfile=os.path.join(path, entry.filename),
                            doraise=True,
                            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
                        )
                    target.write(compiled, entry.filename + "c")
                    added += 1
    os.replace(partial, path)  # atomic: a process opening the zip sees one or the other
    return added


def main() -> None:
    path = pyspark_zip()
    added = add_bytecode(path)
    print(f"{path}: {added} .pyc added" if added else f"{path}: has bytecode", file=sys.stderr)


if __name__ == "__main__":
    main()

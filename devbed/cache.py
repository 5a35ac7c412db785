"""Heavy downloads of the test support (broker jars, the schema registry), cached under
$STREAMJOB_CACHE once: concurrent callers (test sessions side by side) wait for one build."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

CACHE = Path(os.environ.get("STREAMJOB_CACHE", Path.home() / ".cache" / "streamingjob"))


def built_once(target: Path, build: Callable[[Path], None], needs: str = "mvn") -> Path:
    """`target`, built by `build(tmp)` into a fresh directory that becomes `target` when it
    returns; `target/.complete` marks a finished build, so a broken one is started again."""
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").exists():
            return target
        if shutil.which(needs) is None:
            raise RuntimeError(f"{needs} is required to build {target}")
        tmp = target.with_name(f"{target.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        build(tmp)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        (target / ".complete").touch()
        return target

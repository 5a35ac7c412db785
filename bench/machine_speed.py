"""How fast this machine's cores are right now: a fixed piece of work per core, in CPU time.

CI's minutes depend on the host as much as on the project: on this workplace's virtual
machines the same code took 1.8x the CPU seconds in one week's CI runs as in the week
before (docs/ci.md, runs 53 and 55), and no steal time or hardware counter showed it. Two
fixed loads tell it apart from a change of ours: pure-Python bytecode (what pytest, the
operator and PySpark's workers run) and SHA-256 in C (what the JVMs' and brokers' native
work is closer to). `scripts/test-all.sh` prints the line at the start and end of a run.

    python bench/machine_speed.py        # one line: both rates, best of 5 runs
"""

from __future__ import annotations

import hashlib
import time

BYTES = 16 * 1024 * 1024
LOOPS = 300_000


def _python_work() -> int:
    total = 0
    for i in range(LOOPS):
        total += (i * 7) % 13
    return total


def _hash_work(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _best_cpu_seconds(work, runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return max(best, 1e-9)


def measure() -> dict[str, float]:
    data = bytes(BYTES)
    python_s = _best_cpu_seconds(_python_work)
    hash_s = _best_cpu_seconds(lambda: _hash_work(data))
    return {
        "python_mloops_per_cpu_s": round(LOOPS / python_s / 1e6, 2),
        "sha256_mb_per_cpu_s": round(BYTES / hash_s / 1e6),
    }


def main() -> None:
    speed = measure()
    print(
        f"machine speed: {speed['python_mloops_per_cpu_s']} M Python loops and "
        f"{speed['sha256_mb_per_cpu_s']} MB of SHA-256 per CPU second (bench/machine_speed.py)",
        flush=True,
    )


if __name__ == "__main__":
    main()

"""`python -m simulation [SEEDS] [--first]`: runs the histories of a seed range (`0-999`,
or `7`), prints each violation's shrunk story, and ends with one line:
`N histories, M steps, V violations`. Exit 1 when any history broke an invariant.
`--first`: stop at the first one."""

from __future__ import annotations

import sys
import time

from .search import explore


def main(argv: list[str]) -> int:
    first = "--first" in argv
    argv = [a for a in argv if a != "--first"]
    seeds = argv[0] if argv else "0-99"
    low, _, high = seeds.partition("-")
    started = time.monotonic()
    histories, steps, broken = explore(
        range(int(low), int(high or low) + 1), out=sys.stdout, first=first
    )
    took = time.monotonic() - started
    print(
        f"{histories} histories, {steps} steps, {len(broken)} violations "
        f"({took:.1f} s, {steps / max(took, 1e-9):.0f} steps/s)"
    )
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

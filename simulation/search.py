"""Runs histories (side by side on every core), shrinks a failing one to a minimal plan and
tells it as a story."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
from collections.abc import Iterable, Iterator
from typing import TextIO

from .history import FAULTS, Act, History, Outcome, plan


def run(seed: int, acts: list[Act] | None = None) -> Outcome:
    with _quiet("streamingjob_operator", "spark_app"):
        return History(seed, plan(seed) if acts is None else acts).run()


@contextlib.contextmanager
def _quiet(*names: str) -> Iterator[None]:
    """The product's log lines (a refused write of a replica that lost the Lease, offsets
    skipped as lost, ...) are the history's, told by its trace; silenced while it runs only
    (a test process's later tests read those loggers)."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def shrink(outcome: Outcome) -> Outcome:
    """Drops acts one at a time while the same rule still breaks (delta debugging's simplest
    form: every act is tried once per pass until a pass removes nothing)."""
    rule = outcome.violations[0].rule
    best = outcome
    changed = True
    while changed:
        changed = False
        for i in range(len(best.plan) - 1, -1, -1):
            candidate = best.plan[:i] + best.plan[i + 1 :]
            trial = run(best.seed, candidate)
            if trial.violations and trial.violations[0].rule == rule:
                best, changed = trial, True
    return best


def story(outcome: Outcome, tail: int = 40) -> str:
    acts = "\n".join(f"  {'fault' if a.name in FAULTS else 'act  '} {a}" for a in outcome.plan)
    trace = "\n".join(f"  {line}" for line in outcome.trace[-tail:])
    broken = "\n".join(f"  {v}" for v in outcome.violations)
    return (
        f"seed {outcome.seed}: {len(outcome.plan)} acts\n{acts}\n"
        f"what happened (last {tail} lines):\n{trace}\nbroken:\n{broken}\n"
    )


def _one(seed: int) -> Outcome:
    outcome = run(seed)
    if not outcome.violations:
        return outcome
    small = shrink(outcome)
    small.steps = outcome.steps  # the history's, not the shrinking's
    return small


def _workers() -> multiprocessing.context.BaseContext:
    """Workers forked from a fresh single-threaded server, never from the caller: a fork of a
    process with threads (a pytest session whose earlier tests left API clients' pools)
    copies objects those threads were changing, and a worker's garbage collector then
    crashed on one (CI, stop 48: a segfault in the rest tier)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


def explore(
    seeds: Iterable[int], out: TextIO | None = None, jobs: int = 0, first: bool = False
) -> tuple[int, int, list[Outcome]]:
    """(histories, steps, the shrunk failing ones); `jobs` processes (0: one per core);
    `first`: stop at the first failing history."""
    histories = steps = 0
    broken: list[Outcome] = []
    jobs = jobs or os.cpu_count() or 1
    with _workers().Pool(jobs) as pool:
        for outcome in pool.imap_unordered(_one, seeds, chunksize=4):
            histories += 1
            steps += outcome.steps
            if outcome.violations:
                broken.append(outcome)
                if out is not None:
                    out.write(story(outcome) + "\n")
                    out.flush()
                if first:
                    pool.terminate()
                    break
    return histories, steps, broken

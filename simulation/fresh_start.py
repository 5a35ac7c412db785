"""A simulated driver's fresh start (driver.py), by the runner's rules: the group's committed
offsets with the leader epochs they were committed with (`offsets.resolve_start`,
`offsets.epochs_at`, as `driver_side` resolves them), the start checked for offsets
retention deleted (losses.py), and what the checker must know of where a group starts anew."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_app.api import offsets as off
from spark_app.api.manifest import RunnerManifest
from spark_app.api.offsets import Epochs, Positions
from spark_app.source import data_loss

from .driver_world import World


class FreshStart:
    """Mixed into driver.Driver, whose fields these are."""

    manifest: RunnerManifest | None
    batch: int
    stage: str
    batch_start: Positions
    start_epochs: Epochs

    if TYPE_CHECKING:  # the Driver's own (and LossRules')

        @property
        def group(self) -> str: ...

        def _judge_losses(self, w: World, begin: Positions) -> bool: ...

    def _resolve(self, w: World) -> None:
        """A fresh query's start: the group's committed offsets, earliest where none."""
        assert self.manifest is not None
        source = self.manifest.spec.job.source
        mode = off.parse_starting_offsets(source.starting_offsets)
        committed, kept = w.kafka.committed(self.group), w.kafka.committed_epochs(self.group)
        decisions = {
            tp: off.resolve_start(
                tp,
                mode,
                source.offset_reset_strategy,
                w.kafka.low[tp],
                high,
                committed.get(tp),
                None,
                kept.get(tp),
            )
            for tp, high in sorted(w.kafka.end.items())
        }
        if self._judge_losses(w, data_loss.resumed_from(decisions)):
            self.batch, self.stage = 0, "plan"
            self.batch_start = {tp: d.offset for tp, d in decisions.items()}
            # a committed position keeps the epoch it was committed with (driver_side)
            from_group = {
                tp: kept[tp]
                for tp, d in decisions.items()
                if d.origin == "committed" and tp in kept
            }
            now = off.epochs_at(self.batch_start, w.kafka.end, w.kafka.epochs())
            self.start_epochs = {**now, **from_group}
            for tp in decisions.keys() - committed.keys():  # where the group starts anew
                w.kafka.started_anew(self.group, tp, decisions[tp].offset)
            self._past_the_end(w, decisions, kept)

    def _past_the_end(
        self, w: World, decisions: dict[tuple[str, int], off.StartDecision], kept: Epochs
    ) -> None:
        """A committed offset with no leader epoch (set by hand) past the log end reads as a
        recreated topic (resolve_start: the reset strategy's choice, data_loss.resumed_from:
        nothing lost). After an unclean election truncated the log below it, that is a start
        anew too: what the log kept below the start is not the group's to read, what it kept
        above may be read again (rule 16: an offset set by hand starts unvalidated)."""
        for tp, d in decisions.items():
            if d.replaced is not None and d.replaced > w.kafka.end[tp] and tp not in kept:
                w.kafka.started_anew(self.group, tp, d.offset)
                w.kafka.reread.update(w.kafka.records({tp: d.offset}, {tp: w.kafka.end[tp]}))

"""Which read a dead-letter transaction belongs to (rule 16 with a dead-letter topic): a read
that began below its batch's start, from a divergence point after an unclean election, is
named so that the progress of another read skips none of the new leader's records."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_app.api.dead_letter_options import DeadLetterTarget
from spark_app.api.sink_rules import Progress
from spark_app.formats.poison import DeadRecord
from spark_app.sinks.dead_letter import progress_epoch_to_check, read_name, transaction_of
from spark_app.source import value_decoder
from spark_app.source.partition_range import KafkaInputPartition

pytestmark = pytest.mark.unit


def _dead(offset: int) -> DeadRecord:
    return DeadRecord("orders", 0, offset, None, None, b"x", "bad-magic-byte", "poison")


def test_a_read_below_its_start_writes_what_another_reads_progress_passed():
    """The progress 17 was an older leader's records; the read from 12 writes 12 and 15, and
    its own committed progress then skips them on a retry."""
    below = read_name(17, 12)
    records = [_dead(12), _dead(15), _dead(22)]
    assert transaction_of(records, Progress(17), 23, below) == (records, Progress(23, below))
    assert transaction_of(records, Progress(23, below), 23, below) is None
    assert transaction_of(records, Progress(16, below), 23, below) == (
        records[2:],
        Progress(23, below),
    )
    # a read that began where planned: the progress counts, whoever committed it
    assert read_name(17, 17) == ""
    assert transaction_of(records, Progress(17, below), 23) == (records[2:], Progress(23))


def test_every_batch_of_a_read_is_named_by_where_the_read_began(monkeypatch):
    """The decoder names the read by its first batch: a later batch (past the start) of the
    same read keeps the name, so that its transactions and a retry's agree."""
    calls = []

    def dead_rows(batch, decoders, start, dead):
        dead.extend(_dead(o) for o in batch.column("offset").to_pylist())
        return batch

    monkeypatch.setattr(value_decoder, "decode_columns", dead_rows)
    monkeypatch.setattr(
        value_decoder, "write_dead_records", lambda *args: calls.append(args[4:6]) or 0
    )
    target = DeadLetterTarget("dead", {}, "orders", 1, "g")
    p = KafkaInputPartition("orders", 0, 17, 23, {}, dead_letter=target, end_epoch=4)
    batches = [pa.record_batch({"offset": [12, 13]}), pa.record_batch({"offset": [18, 22]})]
    list(value_decoder._decode(iter(batches), {}, p))
    assert calls == [(14, "diverged 17->12 epoch 4"), (23, "diverged 17->12 epoch 4")]


def test_a_progress_made_in_an_earlier_leaders_log_counts_only_what_that_log_still_holds():
    """Simulation seeds 775 and 896: the progress (10) was made reading leader epoch 0's log;
    an unclean election cut it to 5, the new leader (epoch 1) wrote 5.. again, and an offsets
    action moved the group back to 0. The redeploy's read (planned in epoch 1) asks where
    epoch 0's log ends now (5): its poison record 3 was written before, 7 is the new
    leader's and is written."""
    made = Progress(10, read_name(0, 0, 0))
    records = [_dead(3), _dead(7), _dead(11)]
    read = read_name(0, 0, 1)
    assert made.metadata == "epoch 0" and read == "epoch 1"
    assert progress_epoch_to_check(made, records, read) == 0
    assert transaction_of(records, made, 12, read, kept_below=5) == (
        records[1:],
        Progress(12, read),
    )
    # no question: the same leader's log, no record below the progress, an older progress
    assert progress_epoch_to_check(made, records, read_name(0, 0, 0)) is None
    assert progress_epoch_to_check(made, records[2:], read) is None
    assert progress_epoch_to_check(Progress(10), records, read) is None

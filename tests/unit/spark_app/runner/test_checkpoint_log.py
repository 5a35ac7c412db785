"""Reading a checkpoint's logs back, and the never-backwards merge with the group's offsets
(rules 3, 5 and 9)."""

import pytest

from spark_app.runner.checkpoint_log import (
    CheckpointUnreadable,
    ahead_of_group,
    newest_batch,
    source_end_offsets,
    source_offset,
)

pytestmark = pytest.mark.unit

METADATA = '{"batchWatermarkMs":0,"batchTimestampMs":1700000000000,"conf":{"a":"b"}}'


def test_the_newest_batch_skips_temporary_and_other_files():
    assert newest_batch(["0", "1", "10", "9", ".11.tmp", "metadata", "11.crc"]) == 10
    assert newest_batch([".0.tmp"]) is None
    assert newest_batch([]) is None


def test_end_offsets_come_from_the_sources_line_of_an_offset_log_entry():
    entry = f'v1\n{METADATA}\n{{"offsets":{{"t":{{"0":10,"1":7}}}},"start":{{"t":{{"0":0}}}}}}'
    assert source_end_offsets(entry) == {("t", 0): 10, ("t", 1): 7}
    # Another source's line, or none ("-"), before ours: ours is still found.
    entry = f'v1\n{METADATA}\n-\n{{"logOffset":3}}\n{{"offsets":{{"u":{{"2":5}}}}}}\n'
    assert source_end_offsets(entry) == {("u", 2): 5}


def test_the_leader_epochs_kept_with_the_end_offsets_are_read_back_for_the_group_commit():
    from spark_app.api import offsets as off
    from spark_app.runner.supervise import end_epochs

    line = '{"offsets":{"t":{"0":10,"1":7}},"epochs":{"t":{"0":4}}}'
    assert off.end_epochs(source_offset(f"v1\n{METADATA}\n{line}")) == {("t", 0): 4}
    # the same dict as Spark's progress report holds it (a JSON string), for each batch's commit
    assert end_epochs({"sources": [{"endOffset": line}]}) == {("t", 0): 4}
    assert end_epochs({"sources": [{"endOffset": '{"offsets":{"t":{"0":10}}}'}]}) == {}
    assert end_epochs({}) == {}


@pytest.mark.parametrize(
    "entry",
    ["", "garbage", f"v1\n{METADATA}\n-", f'v1\n{METADATA}\n{{"logOffset":3}}'],
)
def test_an_entry_without_our_offsets_is_unreadable(entry):
    with pytest.raises(CheckpointUnreadable):
        source_end_offsets(entry)


def test_only_partitions_where_the_durable_end_is_ahead_are_committed():
    durable = {("t", 0): 100, ("t", 1): 50, ("t", 2): 30, ("t", 3): 8}
    group = {("t", 0): 90, ("t", 1): 50, ("t", 2): 45, ("t", 3): None}
    # 0 behind → committed; 1 equal → left; 2 ahead of the checkpoint → never moved back;
    # 3 without a committed offset → committed.
    assert ahead_of_group(durable, group) == {("t", 0): 100, ("t", 3): 8}
    assert ahead_of_group(durable, {}) == durable
    assert ahead_of_group({}, group) == {}


def test_a_file_sinks_compacted_entries_count_as_batches():
    assert newest_batch(["8", "9.compact", ".10.tmp", "_temporary"]) == 9

"""Options arrive as strings; every error names the option and the fix."""

import pickle
import re

import pytest

from spark_app.api.option_values import OptionError
from spark_app.api.options import SourceOptions, redact

pytestmark = pytest.mark.unit

BASE = {"kafka.bootstrap.servers": "b:9092", "subscribe": "a, b", "kafka.group.id": "g"}


def test_defaults_mirror_flink_and_spark():
    options = SourceOptions.parse(BASE)
    assert options.topics == ("a", "b")
    assert options.starting_offsets == "committed"
    assert options.offset_reset_strategy == "earliest"
    assert options.commit_offsets_on_checkpoints is True
    assert options.fail_on_data_loss is True
    assert options.isolation_level == "read_committed"
    assert options.read_path == "auto"
    assert SourceOptions.parse({**BASE, "readPath": "Python"}).read_path == "python"
    assert options.client()["bootstrap.servers"] == "b:9092"
    assert pickle.loads(pickle.dumps(options)) == options  # travels to executors


def test_the_drivers_environment_sets_the_default_read_path(monkeypatch):
    monkeypatch.setenv("STREAMJOB_READ_PATH", "python")
    assert SourceOptions.parse(BASE).read_path == "python"
    assert SourceOptions.parse({**BASE, "readPath": "native"}).read_path == "native"
    monkeypatch.setenv("STREAMJOB_READ_PATH", "fast")
    with pytest.raises(OptionError, match="readPath='fast' must be one of"):
        SourceOptions.parse(BASE)


def test_option_names_are_case_insensitive_like_sparks():
    options = SourceOptions.parse({**BASE, "MAXOFFSETSPERTRIGGER": "10", "failondataloss": "FALSE"})
    assert options.max_offsets_per_trigger == 10
    assert options.fail_on_data_loss is False


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kafka.bootstrap.servers": ""}, "kafka.bootstrap.servers is required"),
        ({"subscribePattern": "a.*"}, "exactly one of the options subscribe and subscribePattern"),
        ({"kafka.group.id": None}, "kafka.group.id is required while commitOffsetsOnCheckpoints"),
        ({"startingOffsets": "yesterday"}, "startingOffsets 'yesterday'"),
        ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger=0 must be >= 1"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss='maybe' must be true or false"),
        ({"offsetResetStrategy": "none"}, "offsetResetStrategy='none' must be one of"),
        ({"readPath": "rust"}, "readPath='rust' must be one of auto, native, python"),
        ({"nativeEngine": "rust"}, "nativeEngine='rust' must be one of auto, fetch, librdkafka"),
        ({"kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit is managed by the source"),
        ({"kafka.auto.offset.reset": "latest"}, "use offsetResetStrategy"),
    ],
)
def test_bad_options_name_the_option(change, message):
    raw = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    with pytest.raises(OptionError, match=re.escape(message)):
        SourceOptions.parse(raw)


def test_committed_start_without_a_group_is_rejected_even_without_commits():
    raw = {
        "kafka.bootstrap.servers": "b:9092",
        "subscribe": "a",
        "commitOffsetsOnCheckpoints": "false",
    }
    with pytest.raises(OptionError, match=r"startingOffsets=committed needs kafka\.group\.id"):
        SourceOptions.parse(raw)
    assert SourceOptions.parse({**raw, "startingOffsets": "earliest"}).group_id is None


def test_credentials_never_show_in_repr_or_redacted_config():
    options = SourceOptions.parse(
        {**BASE, "kafka.sasl.password": "hunter2", "kafka.security.protocol": "SASL_SSL"}
    )
    assert "hunter2" not in repr(options)
    assert redact(options.client())["sasl.password"] == "***"
    assert options.client()["sasl.password"] == "hunter2"

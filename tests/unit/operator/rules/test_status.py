"""Status helpers, report parsing, settings, names, and the Kafka reader's failure mode."""

from __future__ import annotations

import json

import pytest

from spark_app.api.options import SourceOptions
from spark_app.api.source_spec import SourceSpec
from spark_app.kafka.metadata import KafkaMetadata
from streamingjob_operator.api.models import (
    HistoryEntry,
    InvalidSpecError,
    ReconcileFailure,
    StreamingJobStatus,
    parse_spec,
)
from streamingjob_operator.io.kafka import KafkaTarget, client_overrides, held_back, read_offsets
from streamingjob_operator.rules.observed import iso, parse_report, pod_info
from streamingjob_operator.rules.status import KafkaView, apply_kafka, compute_lag, set_conditions
from streamingjob_operator.settings import OperatorSettings
from tests.unit.operator.helpers_operator import T0, later

pytestmark = pytest.mark.unit


def conditions(st):
    return {c.type: c for c in st.conditions}


def test_conditions_follow_phase_and_keep_transition_times():
    st = StreamingJobStatus(phase="Launching", message="first launch")
    set_conditions(st, 4, T0)
    c = conditions(st)
    assert c["Progressing"].status == "True" and c["Ready"].status == "False"
    assert c["Degraded"].status == "False"
    assert {x.observed_generation for x in st.conditions} == {4}
    st.phase = "Running"
    set_conditions(st, 4, later(5))
    c2 = conditions(st)
    assert c2["Ready"].status == "True"
    assert c2["Ready"].last_transition_time == iso(later(5))
    assert c2["Degraded"].last_transition_time == iso(T0)  # unchanged status keeps its time


def test_degraded_reasons():
    st = StreamingJobStatus(phase="Invalid", message="spec.kafkaCredentials.secretName: x")
    set_conditions(st, 1, T0)
    d = conditions(st)["Degraded"]
    assert (d.status, d.reason) == ("True", "InvalidSpec")
    assert "spec.kafkaCredentials.secretName" in d.message
    st = StreamingJobStatus(phase="Running")
    set_conditions(st, 1, T0, KafkaView(problem="spec.job.source.bootstrapServers: down"))
    d = conditions(st)["Degraded"]
    assert d.reason == "KafkaUnavailable" and "bootstrapServers" in d.message


def test_a_kafka_problem_after_good_readings_shows_only_once_it_lasts():
    """A broker restart answers a reading wrongly for a moment: within the grace of the last
    good reading the problem is held back (no Degraded, the last offsets stay); past it, or
    for a job never read well, it shows."""
    problem = "spec.job.source.bootstrapServers: Kafka unavailable (a handshake cut short)"
    failed = KafkaView(read_at=later(20), problem=problem)
    held = held_back(failed, good_at=later(0), grace_s=60)
    assert held.problem is None and held.committed is None and held.read_at == later(20)
    st = StreamingJobStatus(phase="Running")
    set_conditions(st, 1, later(20), held)
    assert conditions(st)["Degraded"].status == "False"
    assert held_back(failed, good_at=later(-40), grace_s=60).problem == problem
    assert held_back(failed, good_at=None, grace_s=60).problem == problem  # never read well
    ok = KafkaView(read_at=later(20), committed={}, end={})
    assert held_back(ok, good_at=later(0), grace_s=60) is ok


def test_a_failing_reconcile_is_degraded_above_everything_else_until_cleared():
    failure = ReconcileFailure(
        reason="ApiRejected", message="create pod ns/x: rejected: bad label", since="t", count=3
    )
    st = StreamingJobStatus(phase="Launching", reconcile_failure=failure)
    set_conditions(st, 1, T0, KafkaView(problem="spec.job.source.bootstrapServers: down"))
    d = conditions(st)["Degraded"]
    assert (d.status, d.reason) == ("True", "ApiRejected")
    assert "bad label" in d.message and "3 time(s)" in d.message
    st.reconcile_failure = None
    set_conditions(st, 1, later(1))
    assert conditions(st)["Degraded"].status == "False"


def test_driver_not_starting_is_degraded_until_it_runs():
    st = StreamingJobStatus(phase="Pending", message="driver x cannot start: ErrImagePull")
    st.history = [HistoryEntry(time=iso(T0), reason="DriverNotStarting", message=st.message)]
    set_conditions(st, 1, T0)
    d = conditions(st)["Degraded"]
    assert (d.status, d.reason, d.message) == ("True", "DriverNotStarting", st.message)
    st.phase = "Running"
    set_conditions(st, 1, later(1))
    assert conditions(st)["Degraded"].status == "False"


def test_a_driver_not_starting_is_shown_before_the_operators_kafka_reading():
    """Both at once (an image that cannot be pulled, brokers the operator cannot read): the
    driver's, which the user must fix for the job to run at all; before, whichever the
    operator saw first won for good (a race its tests lost on a loaded machine)."""
    st = StreamingJobStatus(phase="Pending", message="driver x cannot start: ErrImagePull")
    st.history = [HistoryEntry(time=iso(T0), reason="DriverNotStarting", message=st.message)]
    set_conditions(st, 1, T0, KafkaView(problem="spec.job.source.bootstrapServers: down"))
    d = conditions(st)["Degraded"]
    assert (d.status, d.reason, d.message) == ("True", "DriverNotStarting", st.message)
    st.phase = "Running"  # it runs: the Kafka reading's problem shows
    set_conditions(st, 1, later(1), KafkaView(problem="spec.job.source.bootstrapServers: down"))
    assert conditions(st)["Degraded"].reason == "KafkaUnavailable"


def test_pod_info_reads_why_a_pod_cannot_start():
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}
    pod = {
        "metadata": {"name": "p"},
        "status": {"phase": "Pending", "containerStatuses": [{"name": "driver", "state": waiting}]},
    }
    assert pod_info(pod).not_starting == "ImagePullBackOff: Back-off pulling image"
    waiting["waiting"] = {"reason": "ContainerCreating"}  # every start waits for this
    assert pod_info(pod).not_starting == ""
    pod["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient cpu.",
            }
        ],
    }
    assert (
        pod_info(pod).not_starting == "Unschedulable: 0/1 nodes are available: 1 Insufficient cpu."
    )


def test_lag_and_offsets():
    committed = {"t": {"0": 5, "1": 10}}
    end = {"t": {"0": 8, "1": 10, "2": 4}}
    assert compute_lag(committed, end) == 3 + 0 + 4
    st = StreamingJobStatus()
    apply_kafka(st, KafkaView(committed=committed, end=end, read_at=T0))
    assert st.lag == 7 and st.committed_offsets == committed and st.offsets_time == iso(T0)


def test_report_parsing():
    report = {
        "epoch": 2,
        "attempt": 1,
        "startPath": "fresh",
        "restoredBatch": None,
        "startOffsets": {
            "orders": {
                "0": {"offset": 5, "from": "committed"},
                "1": {"offset": 0, "from": "earliest"},
            }
        },
        "latestBatch": {"batchId": 3, "numInputRows": 10, "timestamp": "2026-01-01T00:00:00Z"},
    }
    parsed = parse_report({"data": {"report.json": json.dumps(report)}})
    assert (parsed.epoch, parsed.attempt, parsed.start_path) == (2, 1, "fresh")
    assert parsed.start_detail == "fresh: committed for orders-0; earliest for orders-1"
    assert parsed.last_progress_time == "2026-01-01T00:00:00Z"
    restored = parse_report(
        {
            "data": {
                "report.json": json.dumps(
                    {
                        "epoch": 1,
                        "attempt": 2,
                        "startPath": "restored",
                        "restoredBatch": 41,
                        "groupId": "orders-v2",
                    }
                )
            }
        }
    )
    assert restored.start_detail == "restored from checkpoint batch 41"
    assert (restored.group_id, parsed.group_id) == ("orders-v2", "")  # "": an older runner
    assert parse_report({"data": {"report.json": "not json"}}) is None
    assert parse_report({"data": {}}) is None
    assert parse_report(None) is None


def test_pod_info_reads_termination_and_node_loss():
    pod = {
        "metadata": {
            "name": "j-e1-a1-driver",
            "labels": {"spark-role": "driver", "sparkkafka.dev/epoch": "1"},
        },
        "status": {
            "phase": "Failed",
            "conditions": [
                {"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-01-01T12:00:00Z"}
            ],
            "containerStatuses": [
                {
                    "name": "driver",
                    "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                }
            ],
        },
    }
    info = pod_info(pod)
    assert info.epoch == 1 and info.role == "driver"
    assert info.termination.exit_code == 137 and info.termination.reason == "OOMKilled"
    assert info.ready_unknown_since == T0


def test_invalid_spec_names_the_field():
    with pytest.raises(InvalidSpecError, match=r"spec\.restartPolicy\.type"):
        parse_spec(
            {
                "image": "i",
                "job": {
                    "source": {"bootstrapServers": "k:1", "subscribe": ["t"], "groupId": "g"},
                    "sink": {"format": "noop"},
                },
                "checkpoint": {"location": "s3a://x"},
                "restartPolicy": {"type": "Sometimes"},
            }
        )


def test_settings_from_env():
    s = OperatorSettings.from_env(
        {"STREAMINGJOB_NAMESPACES": "a, b", "STREAMINGJOB_RESYNC_SECONDS": "1.5"}
    )
    assert s.namespaces == ("a", "b") and s.resync_seconds == 1.5
    assert OperatorSettings.from_env({}).namespaces == ()
    with pytest.raises(ValueError):
        OperatorSettings.from_env({"STREAMINGJOB_WORKERS": "0"})


def test_kafka_target_never_shows_credentials():
    source = SourceSpec(bootstrap_servers="k:1", subscribe=["t"], group_id="g")
    target = KafkaTarget.of(source, {"KAFKA_SASL_USERNAME": "user", "KAFKA_SASL_PASSWORD": "s3"})
    assert ("kafka.sasl.password", "s3") in target.options  # the driver's own settings
    assert "s3" not in repr(target) and "s3" not in str(target)


@pytest.mark.timeout(30)
def test_unreachable_broker_is_a_problem_naming_the_field():
    source = SourceSpec(bootstrap_servers="127.0.0.1:1", subscribe=["t"], group_id="g")
    options = SourceOptions.parse(dict(KafkaTarget.of(source, {}).options))
    metadata = KafkaMetadata(options, 1.0, client_overrides(1.0))
    try:
        view = read_offsets(metadata)
    finally:
        metadata.close()
    assert view.problem and view.problem.startswith("spec.job.source.bootstrapServers")
    assert view.committed is None

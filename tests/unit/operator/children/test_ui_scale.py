"""The Spark UI switch (spec.sparkUI) and the scale subresource's fields (status.executors,
status.selector): builders, names, and the decisions they lead to."""

from __future__ import annotations

import pytest

from streamingjob_operator.api.models import StreamingJobStatus
from streamingjob_operator.api.naming import LABEL_JOB, executor_selector, ui_service_name
from streamingjob_operator.children.builders import build_ui_service
from streamingjob_operator.children.driver_pod import spark_confs
from streamingjob_operator.children.validation import check_spec
from streamingjob_operator.rules.decide import pod_hash
from tests.unit.operator.children.test_builders import JOB, _owned
from tests.unit.operator.helpers_operator import (
    NAME,
    driver,
    executor,
    later,
    launched,
    make_spec,
    run,
)

pytestmark = pytest.mark.unit


def test_ui_service_selects_the_current_driver_on_4040_named_http():
    svc = build_ui_service(JOB)
    _owned(svc)
    assert svc["metadata"]["name"] == "orders-ui"
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["selector"] == {LABEL_JOB: "orders", "spark-role": "driver"}
    assert svc["spec"]["ports"] == [{"name": "http", "port": 4040, "targetPort": 4040}]


def test_ui_service_names_are_dns_labels():
    assert ui_service_name("orders") == "orders-ui"
    assert ui_service_name("orders.v2") != ui_service_name("orders-v2")
    long = ui_service_name("x" * 253)
    assert len(long) <= 63 and long.endswith("-ui")
    assert ui_service_name("1abc")[0].isalpha()


def test_spark_ui_conf_follows_the_switch_and_is_not_settable_in_spark_conf():
    job = {**JOB, "spec": {}}
    off = spark_confs(job, make_spec(), "d", 1, 1)
    on = spark_confs(job, make_spec(sparkUI={"enabled": True}), "d", 1, 1)
    assert (off["spark.ui.enabled"], on["spark.ui.enabled"]) == ("false", "true")
    (problem,) = check_spec(make_spec(sparkConf={"spark.ui.enabled": "true"}))
    assert "spec.sparkUI.enabled" in str(problem)


def test_an_operator_upgrade_keeps_the_pod_hash_of_jobs_without_the_switch():
    # pod_hash(make_spec()) as the released operator (0.1.0, no sparkUI field) computed it
    assert pod_hash(make_spec()) == "25d83883152cdde8"
    assert pod_hash(make_spec(sparkUI={"enabled": False})) == "25d83883152cdde8"
    assert pod_hash(make_spec(sparkUI={"enabled": True})) != "25d83883152cdde8"


def _restarted(before, after):
    """Running under `before`, the spec becomes `after`: the decisions until the new driver
    is launched (the old one stopped first)."""
    st = launched(before)
    pods = [driver(st.driver_pod), executor(f"{st.driver_pod}-exec-1", st.driver_pod)]
    d = run(after, st, pods, later(10))  # the new target, recorded first
    assert "pod settings changed (restore)" in d.status.message
    d = run(after, d.status, pods, later(10))
    assert d.action == "delete" and d.delete == (st.driver_pod,)
    d = run(after, d.status, [], later(11))
    assert d.action == "launch"
    return st, d


def test_switching_the_ui_on_restarts_in_the_epoch_and_names_the_service():
    before, after = make_spec(), make_spec(sparkUI={"enabled": True})
    st, d = _restarted(before, after)
    assert st.spark_ui_service == ""
    assert (d.status.epoch, d.status.attempt) == (st.epoch, st.attempt + 1)
    assert d.status.spark_ui_service == ui_service_name(NAME)
    _, d = _restarted(after, before)  # and off again
    assert d.status.spark_ui_service == ""


def test_scaling_restarts_in_the_epoch_and_reports_executors_once_running():
    before, after = make_spec(), make_spec(executor__instances=3)
    st, d = _restarted(before, after)
    assert st.executors == 1 and st.selector == executor_selector(NAME)
    assert (d.status.epoch, d.status.attempt) == (st.epoch, st.attempt + 1)
    assert d.status.executors == 0  # not running yet
    d = run(after, d.status, [driver(d.status.driver_pod, "Pending")], later(12))
    d = run(after, d.status, [driver(d.status.driver_pod)], later(13))
    assert d.status.phase == "Running" and d.status.executors == 3
    assert d.status.selector == "spark-role=executor,sparkkafka.dev/job=orders"


def test_a_suspended_job_has_no_executors():
    spec, suspended = make_spec(), make_spec(suspend=True)
    st = launched(spec)
    d = run(suspended, st, [driver(st.driver_pod)], later(10))
    d = run(suspended, d.status, [], later(11))
    assert d.status.phase == "Suspended" and d.status.executors == 0
    assert StreamingJobStatus().executors == 0

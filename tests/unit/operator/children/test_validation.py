"""Validation, pure: the one module, the schema's bounds, credentials refused, every valid
name yields valid child names, decide() survives every spec the schema admits."""

from __future__ import annotations

import copy
import re
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_app.api.options import RESERVED_CLIENT_KEYS
from spark_app.api.source_spec import CLIENT_KEY_FIELDS, SourceSpec
from streamingjob_operator.api.crd import build_crd
from streamingjob_operator.api.models import StreamingJobStatus
from streamingjob_operator.api.naming import (
    LABEL_JOB,
    driver_pod_name,
    label_value,
    service_name,
)
from streamingjob_operator.children.builders import (
    build_disruption_budget,
    build_go_configmap,
    build_report_configmap,
    build_service,
)
from streamingjob_operator.children.driver_pod import build_driver_pod, build_job_configmap
from streamingjob_operator.children.dry_run import (
    DryRun,
    Rejection,
    dry_run_pods,
    rejection_problems,
)
from streamingjob_operator.children.rbac import build_role, build_service_account
from streamingjob_operator.children.validation import check_source, check_spec, parse, summary
from streamingjob_operator.rules.launch import Launch
from streamingjob_operator.rules.status import status_body
from tests.support.bad_input import classes
from tests.unit.operator.helpers_operator import (
    BASE_SPEC,
    exited,
    later,
    launched,
    make_spec,
    run,
)

pytestmark = pytest.mark.unit

DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _walk(node, path="spec"):
    yield path, node
    for name, sub in (node.get("properties") or {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


def test_every_value_of_the_spec_is_bounded_in_the_schema():
    """A 1 MiB string once made every status write fail; huge timings overflowed decide()."""
    spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    unbounded = []
    for path, node in _walk(spec):
        kind = node.get("type")
        if kind == "string" and "enum" not in node and "maxLength" not in node:
            unbounded.append(path)
        if kind == "array" and "maxItems" not in node:
            unbounded.append(path)
        if kind == "object" and "additionalProperties" in node and "maxProperties" not in node:
            unbounded.append(path)
        free = "restartNonce" in path or "redeployNonce" in path
        if kind in ("integer", "number") and "maximum" not in node and not free:
            unbounded.append(path)
    assert unbounded == []


def _spec(**changes):
    base = make_spec().model_dump(mode="json", by_alias=True, exclude_none=True)
    for dotted, value in changes.items():
        node = base
        *parents, last = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return base


BLANK = st.text(alphabet=" \t\n\r", min_size=1, max_size=5)


@FAST
@given(
    field=st.sampled_from(
        [
            ("image", "spec.image"),
            ("job__source__bootstrapServers", "spec.job.source.bootstrapServers"),
            ("job__source__groupId", "spec.job.source.groupId"),
        ]
    ),
    blank=BLANK,
    padded=st.booleans(),
)
def test_blank_or_padded_strings_are_refused_naming_the_field(field, blank, padded):
    key, path = field
    value = f"{blank}x{blank}" if padded else blank
    spec, problems = parse(_spec(**{key: value}))
    assert spec is None and any(p.field == path for p in problems), summary(problems)


@FAST
@given(
    value=st.one_of(
        st.sampled_from(["", "s3a://", "s3a://Bucket/x", "file://relative", "s3a://b/a b"]),
        st.builds(lambda s: f"s3a://bucket/{s}", st.sampled_from(["a?b", "a#b", "a%20", "x:y"])),
        BLANK,
    )
)
def test_bad_checkpoint_locations_are_refused(value):
    spec, problems = parse(_spec(checkpoint__location=value))
    assert spec is None and any(p.field == "spec.checkpoint.location" for p in problems)


@FAST
@given(
    value=st.one_of(
        st.sampled_from(
            ['{"t":{"0":true}}', '{"t":{"0":1e3}}', '{"":{"0":1}}', '{"t":{}}', " earliest"]
        ),
        st.sampled_from(["timestamp:", "timestamp:1\n", "timestamp:99999999999999"]),
        st.integers(min_value=2**63).map(lambda n: f'{{"t":{{"0":{n}}}}}'),
        st.integers(min_value=2**31).map(lambda n: f'{{"t":{{"{n}":1}}}}'),
    )
)
def test_malformed_starting_offsets_are_refused(value):
    spec, problems = parse(_spec(job__source__startingOffsets=value))
    assert spec is None and any("startingOffsets" in p.field for p in problems), value


@FAST
@given(
    where=st.sampled_from(["driver", "executor"]),
    field=st.sampled_from(["memory", "memoryOverhead", "cpuRequest", "cpuLimit"]),
    value=st.sampled_from(["0", "1x", "1.5g", "-1", "0.0001", "1e3", "100m ", "9" * 20, "1 "]),
)
def test_malformed_quantities_are_refused(where, field, value):
    spec, problems = parse(_spec(**{f"{where}__{field}": value}))
    if spec is not None:  # valid as a quantity (e.g. memoryOverhead 0): then it must fit
        assert field == "memoryOverhead"
        return
    assert any(p.field.startswith(f"spec.{where}") for p in problems), summary(problems)


def test_a_heap_spark_refuses_and_a_limit_below_the_request_are_refused():
    _, problems = parse(_spec(executor__memory="256m"))
    assert [p.field for p in problems] == ["spec.executor"]
    _, problems = parse(_spec(driver__cores=2, driver__cpuLimit="1"))
    assert "cpuLimit" in summary(problems)


CREDENTIAL_KEYS = [
    ("spark.hadoop.fs.s3a.secret.key", "spec.s3.credentialsSecret"),
    ("spark.hadoop.fs.s3a.access.key", "spec.s3.credentialsSecret"),
    ("spark.hadoop.fs.s3a.session.token", "spec.s3.credentialsSecret"),
    ("spark.authenticate.secret", "spec.env"),
    ("spark.ssl.keyPassword", "spec.env"),
    ("spark.hadoop.fs.azure.account.key.acct.blob.core.windows.net", "spec.env"),
    ("spark.kafka.sasl.jaas.config", "spec.kafkaCredentials"),
]


@FAST
@given(key=st.sampled_from(CREDENTIAL_KEYS), value=st.text(max_size=20))
def test_credentials_in_spark_conf_are_refused_pointing_at_a_secret_reference(key, value):
    name, fix = key
    spec, problems = parse(_spec(sparkConf={name: value}))
    assert spec is not None, summary(problems)
    (problem,) = check_spec(spec)
    assert problem.field == f"spec.sparkConf[{name!r}]" and fix in problem.fix


@pytest.mark.parametrize(
    "where",
    ["job__source__kafka", "job__sink__options"],
)
@pytest.mark.parametrize(
    "key", ["sasl.password", "sasl.jaas.config", "ssl.key.password", "sasl.username"]
)
def test_credentials_in_job_options_are_refused(where, key):
    spec, problems = parse(_spec(**{where: {key: "hunter2"}}))
    assert spec is not None, summary(problems)
    (problem,) = check_spec(spec)
    assert key in problem.field and "Secret" in problem.fix
    if where == "job__source__kafka":
        assert "spec.kafkaCredentials" in problem.fix


def test_ordinary_settings_are_not_taken_for_credentials():
    conf = {
        "spark.sql.shuffle.partitions": "4",
        "spark.hadoop.fs.s3a.aws.credentials.provider": "x",
        "spark.hadoop.google.cloud.auth.service.account.json.keyfile": "/var/k.json",
        "spark.sql.streaming.stateStore.providerClass": "x",
    }
    kafka = {"key.serializer": "x", "ssl.endpoint.identification.algorithm": "https"}
    spec, problems = parse(_spec(sparkConf=conf, job__source__kafka=kafka))
    assert spec is not None and check_spec(spec) == [], summary(problems)


def test_non_spark_conf_keys_are_refused():
    for key in ("fs.s3a.endpoint", "spark.a b", "spark.x=y", ""):
        spec, problems = parse(_spec(sparkConf={key: "1"}))
        assert spec is None and problems[0].field.startswith("spec.sparkConf"), key


# --- names ---------------------------------------------------------------------------------

_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
NAMES = st.lists(_LABEL, min_size=1, max_size=12).map(".".join).filter(lambda n: len(n) <= 253)


@FAST
@given(name=NAMES)
def test_every_valid_job_name_gives_valid_child_names(name):
    """orders.v2 once gave an invalid Service name and never launched."""
    job = {"metadata": {"name": name, "namespace": "ns", "uid": "u"}, "spec": {}}
    spec = make_spec()
    assert DNS1035_LABEL.fullmatch(service_name(name)) and len(service_name(name)) <= 63
    pod = build_driver_pod(job, spec, Launch(driver_pod_name(name, 1, 1), 1, 1, "s3a://b/x"))
    children = [
        pod,
        build_service(job),
        build_job_configmap(job, spec),
        build_report_configmap(job),
        build_go_configmap(job),
        build_disruption_budget(job, driver_pod_name(name, 1, 1), 2),
        build_service_account(job),
        build_role(job, driver_pod_name(name, 1, 1), 2),
    ]
    for child in children:
        child_name = child["metadata"]["name"]
        assert DNS1123_SUBDOMAIN.fullmatch(child_name) and len(child_name) <= 253, child_name
        selected = (child.get("spec") or {}).get("selector") or {}
        for value in [
            *child["metadata"]["labels"].values(),
            *selected.get("matchLabels", {}).values(),
        ]:
            assert LABEL_VALUE.fullmatch(value) and len(value) <= 63, value
    assert len(pod["metadata"]["name"]) <= 63
    assert child["metadata"]["labels"][LABEL_JOB] == label_value(name)
    assert service_name("orders.v2") != service_name("orders-v2")


# --- decide survives every spec the schema admits ------------------------------------------

TIMINGS = st.fixed_dictionaries(
    {
        "maxRestarts": st.integers(0, 10**12),
        "windowSeconds": st.integers(1, 10**15),
        "stableRunSeconds": st.integers(1, 10**15),
        "startTimeoutSeconds": st.integers(1, 10**15),
        "backoff": st.fixed_dictionaries(
            {
                "baseSeconds": st.floats(0, 1e300, allow_nan=False),
                "capSeconds": st.floats(0, 1e300, allow_nan=False),
            }
        ),
    }
)


@FAST
@given(policy=TIMINGS, failures=st.integers(0, 200))
def test_a_driver_failure_is_recorded_for_every_restart_policy_the_schema_admits(policy, failures):
    """windowSeconds or backoff values near the limits of datetime made decide() raise
    OverflowError after a driver failure, and the failure was never recorded."""
    spec, _ = parse(_spec(restartPolicy=policy))
    if spec is None:
        return  # refused: the schema bounds it
    status = launched(spec).model_copy(update={"consecutive_failures": failures})
    d = run(spec, status, [exited(status.driver_pod, 1)], later(5))
    assert d.status.last_restart_reason == "DriverFailed"
    assert d.status.phase in ("Restarting", "Failed")
    status_body(d.status)  # serialisable
    assert timedelta(seconds=d.requeue_after or 0) >= timedelta(0)


# --- the dry run's answers, attributed -------------------------------------------------------


def _dry_runs(**changes):
    spec, problems = parse(_spec(**changes))
    assert spec is not None, summary(problems)
    job = {"metadata": {"name": "orders", "namespace": "ns", "uid": "u"}, "spec": {}}
    return spec, dry_run_pods(job, spec, StreamingJobStatus())


def test_a_refused_env_entry_is_named_by_its_index_in_the_spec():
    env = [{"name": "OK", "value": "1"}, {"name": "1bad", "value": "2"}]
    spec, (driver, executor) = _dry_runs(env=env)
    index = driver.obj["spec"]["containers"][0]["env"].index(env[1])
    cause = (f"spec.containers[0].env[{index}].name", 'Invalid value: "1bad"')
    (problem,) = rejection_problems(driver, spec, Rejection(422, "Pod is invalid", (cause,)))
    assert problem.field == "spec.env[1]" and "EnvVar" in problem.fix
    assert "driver pod" in problem.message
    assert executor.obj["spec"]["containers"][0]["name"] == "executor"


@pytest.mark.parametrize(
    ("variable", "field"),
    [
        ("KAFKA_SASL_PASSWORD", "spec.kafkaCredentials"),
        ("KAFKA_SINK_SASL_PASSWORD", "spec.sinkKafkaCredentials"),
    ],
)
def test_a_refused_credential_entry_names_the_credentials_it_came_from(variable, field):
    """The operator's own env entries (a Secret's key the API server refuses) are blamed on
    the spec field of their Secret, the source's or the Kafka sink's."""
    spec, (driver, _) = _dry_runs(
        kafkaCredentials={"secretName": "kafka-creds"},
        sinkKafkaCredentials={"secretName": "sink-creds"},
        job__sink={"format": "kafka", "topic": "out"},
    )
    env = driver.obj["spec"]["containers"][0]["env"]
    index = next(i for i, e in enumerate(env) if e["name"] == variable)
    cause = (f"spec.containers[0].env[{index}].valueFrom.secretKeyRef.key", "Invalid value")
    (problem,) = rejection_problems(driver, spec, Rejection(422, "Pod is invalid", (cause,)))
    assert problem.field == field


def test_unknown_fields_are_named_from_the_strict_decoding_message():
    mounts = [{"name": "data", "mountPath": "/data", "readOnlyy": True}]
    volumes = [{"name": "data", "emptyDir": {}}]
    spec, (driver, _) = _dry_runs(volumeMounts=mounts, volumes=volumes)
    index = driver.obj["spec"]["containers"][0]["volumeMounts"].index(mounts[0])
    message = (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown '
        f'field "spec.containers[0].volumeMounts[{index}].readOnlyy"'
    )
    (problem,) = rejection_problems(driver, spec, Rejection(400, message))
    assert problem.field == "spec.volumeMounts[0]"


def test_other_pod_fields_are_blamed_on_the_pod_template():
    spec, (driver, *_) = _dry_runs(podTemplate={"spec": {"priorityClassName": "Not Valid"}})
    cause = ("spec.priorityClassName", "Invalid value")
    (problem,) = rejection_problems(driver, spec, Rejection(422, "Pod is invalid", (cause,)))
    assert problem.field == "spec.podTemplate"


def test_the_dry_run_pods_leave_out_the_account_the_operator_creates_later():
    _, pods = _dry_runs()
    assert all("serviceAccountName" not in p.obj["spec"] for p in pods)
    _, pods = _dry_runs(serviceAccountName="mine")
    assert all(p.obj["spec"]["serviceAccountName"] == "mine" for p in pods)
    assert isinstance(pods[0], DryRun)


# --- bad input that used to reach a driver launch (tests/support/bad_input.py) ---------------

GENERATED = settings(
    max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=[]
)
_JOB = {"metadata": {"name": "orders", "namespace": "ns", "uid": "u"}, "spec": {}}
CLASSES = classes(lambda: copy.deepcopy(BASE_SPEC))


@pytest.mark.parametrize("kind", sorted(set(CLASSES) - {"malformed-pod-templates"}))
@GENERATED
@given(data=st.data())
def test_generated_bad_input_is_refused_naming_the_field(kind, data):
    """Every class is refused by the models or the rules without I/O, naming the field."""
    raw, field = data.draw(CLASSES[kind])
    spec, problems = parse(raw)
    if spec is not None:
        problems = check_spec(spec)
    assert any(p.field.startswith(field) and p.fix for p in problems), summary(problems)
    if kind == "null-values":
        assert "null" in summary(problems)


@GENERATED
@given(case=CLASSES["malformed-pod-templates"])
def test_the_pod_template_s_own_values_reach_a_dry_run(case):
    """Fields the operator sets itself hide the template's value from the real pods' dry
    runs; one more pod shows the pod API every value of the template as written."""
    raw, _ = case
    spec, problems = parse(raw)
    assert spec is not None, summary(problems)
    *real, written = dry_run_pods(_JOB, spec, StreamingJobStatus())
    assert written.template_only and not any(p.template_only for p in real)
    for dotted, value in _leaves(raw["podTemplate"]):
        node = written.obj
        for part in dotted:
            node = node[part]
        assert node == value, dotted


def _leaves(node, path=()):
    if isinstance(node, dict) and node:
        for key, sub in node.items():
            yield from _leaves(sub, (*path, key))
    else:
        yield path, node


def test_no_template_no_extra_dry_run_and_the_account_stays_the_operator_s():
    _, pods = _dry_runs()
    assert len(pods) == 2
    _, pods = _dry_runs(podTemplate={"spec": {"serviceAccountName": "theirs", "hostPID": 1}})
    written = pods[-1].obj["spec"]
    assert "serviceAccountName" not in written and written["hostPID"] == 1
    assert written["automountServiceAccountToken"] is False


def test_the_runner_s_preflight_question_is_asked_before_launch():
    """check_source asks SourceOptions.parse, as the runner's preflight does: a contradiction
    the models would miss (built here past them) is refused naming spec.job.source."""
    spec = make_spec()
    source = spec.job.source.model_copy(
        update={"group_id": None, "commit_offsets_on_checkpoints": False}
    )
    odd = spec.model_copy(update={"job": spec.job.model_copy(update={"source": source})})
    (problem,) = check_source(odd)
    assert problem.field == "spec.job.source" and "committed" in problem.message
    assert check_source(spec) == []


def test_every_client_key_the_source_manages_has_a_field_in_the_manifest():
    assert set(RESERVED_CLIENT_KEYS) <= set(CLIENT_KEY_FIELDS)
    for name in CLIENT_KEY_FIELDS.values():
        assert name in SourceSpec.model_json_schema(by_alias=True)["properties"], name


def test_sink_credentials_without_a_kafka_sink_are_refused_naming_the_field():
    creds = {"secretName": "sink-creds"}
    (problem,) = check_spec(make_spec(sinkKafkaCredentials=creds))  # the base: a file sink
    assert problem.field == "spec.sinkKafkaCredentials"
    assert "sink is parquet" in str(problem) and "format: kafka" in str(problem)
    kafka = make_spec(sinkKafkaCredentials=creds, job__sink={"format": "kafka", "topic": "o"})
    assert check_spec(kafka) == []

"""Manifests the API server itself rejects: the generated schema and its CEL rules."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kubernetes import client

from devbed.polling import wait_for
from streamingjob_operator.api.naming import LABEL_JOB, label_value, service_name
from tests.integration.operator.kube_helpers import (
    DriverWatch,
    Kube,
    job_spec,
    rejected,
    running_operator,
)
from tests.support.bad_input import classes

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    # Hypothesis notices the global `random` state move while it draws an example: the
    # in-process operator's threads (kopf, the client) use it meanwhile, not the strategies.
    pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies"),
]


def test_schema_rejects_bad_enum_naming_the_field(kube: Kube, ns: str):
    spec = job_spec()
    spec["restartPolicy"]["type"] = "Sometimes"
    body = rejected(kube, ns, spec)
    assert "spec.restartPolicy.type" in body


def test_schema_rejects_missing_required_and_unknown_types(kube: Kube, ns: str):
    spec = job_spec()
    del spec["image"]
    assert "spec.image" in rejected(kube, ns, spec)
    spec = job_spec(executor={"instances": 0})
    assert "spec.executor.instances" in rejected(kube, ns, spec)


def test_cel_rules(kube: Kube, ns: str):
    spec = job_spec()
    spec["job"]["source"]["subscribePattern"] = "orders.*"
    body = rejected(kube, ns, spec)
    assert "spec.job.source" in body and "exactly one of subscribe or subscribePattern" in body

    spec = job_spec()
    spec["restartPolicy"]["backoff"] = {"baseSeconds": 10, "capSeconds": 5}
    body = rejected(kube, ns, spec)
    assert "spec.restartPolicy.backoff" in body and "capSeconds must be >= baseSeconds" in body

    spec = job_spec()
    spec["job"]["sink"] = {"format": "parquet"}
    assert "path is required for file sinks" in rejected(kube, ns, spec)


def test_cel_rules_of_the_kafka_sinks_guarantee(kube: Kube, ns: str):
    """The CRD's twins of SinkSpec's rules for deliveryGuarantee, transactionTimeoutMs and
    value: kafka sink settings only, no timeout at-least-once, a typed value only with the
    source's registry, no subject for a raw one; a valid exactly-once sink is accepted as it
    is."""
    from spark_app.api.sink_rules import AT_LEAST_ONCE_NO_TIMEOUT, KAFKA_ONLY
    from spark_app.api.sink_value_spec import NEEDS_SOURCE_REGISTRY, RAW_ALONE

    for sink, message in [
        ({"format": "parquet", "path": "s3a://lake/o", "value": {"format": "avro"}}, KAFKA_ONLY),
        ({"format": "kafka", "topic": "out", "value": {"format": "avro"}}, NEEDS_SOURCE_REGISTRY),
        ({"format": "kafka", "topic": "out", "value": {"subject": "s"}}, RAW_ALONE),
        (
            {"format": "parquet", "path": "s3a://lake/o", "deliveryGuarantee": "exactly-once"},
            KAFKA_ONLY,
        ),
        ({"format": "delta", "path": "s3a://lake/o", "transactionTimeoutMs": 200000}, KAFKA_ONLY),
        (
            {
                "format": "kafka",
                "topic": "out",
                "deliveryGuarantee": "at-least-once",
                "transactionTimeoutMs": 200000,
            },
            AT_LEAST_ONCE_NO_TIMEOUT,
        ),
    ]:
        spec = job_spec()
        spec["job"]["sink"] = sink
        body = rejected(kube, ns, spec)
        assert "spec.job.sink" in body and message in body, body
    spec = job_spec()
    sink = {
        "format": "kafka",
        "topic": "out",
        "deliveryGuarantee": "exactly-once",
        "transactionTimeoutMs": 200000,
    }
    spec["job"]["sink"] = sink
    created = kube.create_job(ns, "kafka-eos", spec)["spec"]["job"]["sink"]
    assert created == {**sink, "outputMode": "append"}


def test_cel_rules_of_typed_records(kube: Kube, ns: str):
    """spec.job.source.value and spec.job.deadLetter: bad combinations refused by the API
    server naming the field; a good one stored with its defaults."""
    registry = {"url": "http://schema-registry.kafka.svc:8081"}

    def spec_with(value: dict | None = None, dead_letter: dict | None = None) -> dict:
        spec = job_spec()
        if value is not None:
            spec["job"]["source"]["value"] = value
        if dead_letter is not None:
            spec["job"]["deadLetter"] = dead_letter
        return spec

    body = rejected(kube, ns, spec_with({"format": "avro"}))
    assert "spec.job.source.value" in body and "value.schemaRegistry" in body
    body = rejected(kube, ns, spec_with({"subject": "orders-value"}))
    assert "spec.job.source.value" in body and "only with value.format avro" in body
    body = rejected(kube, ns, spec_with(dead_letter={"topic": "orders-dead"}))
    assert "spec.job.deadLetter" in body and "source.value.format avro" in body
    spec = spec_with({"format": "avro", "schemaRegistry": registry})
    spec["job"]["source"]["subscribe"] = ["orders", "returns"]
    body = rejected(kube, ns, spec)
    assert "spec.job.source.value" in body and "value.subject is required" in body
    body = rejected(kube, ns, spec_with({"format": "avro", "schemaRegistry": {"url": "ftp://r"}}))
    assert "spec.job.source.value.schemaRegistry.url" in body
    body = rejected(kube, ns, spec_with({"format": "json"}))
    assert "spec.job.source.value" in body and "value.schemaRegistry" in body
    body = rejected(kube, ns, spec_with({"format": "xml", "schemaRegistry": registry}))
    assert "spec.job.source.value.format" in body
    json_value = {"format": "json", "schemaRegistry": registry}
    created = kube.create_job(ns, "typed-json", spec_with(json_value, {"topic": "orders-dead"}))
    assert created["spec"]["job"]["source"]["value"]["format"] == "json"

    value = {"format": "avro", "schemaRegistry": {**registry, "credentialsSecret": {"name": "r"}}}
    created = kube.create_job(ns, "typed", spec_with(value, {"topic": "orders-dead"}))
    stored = created["spec"]["job"]
    assert stored["source"]["value"]["schemaRegistry"]["credentialsSecret"] == {
        "name": "r",
        "usernameKey": "username",
        "passwordKey": "password",
    }
    assert stored["deadLetter"] == {"topic": "orders-dead"}


def test_cel_rules_of_the_key(kube: Kube, ns: str):
    """spec.job.source.key: a decoded key without the value's registry, key fields with a raw
    key, a readerSchema with a version, no key subject with two topics: each refused by the
    API server naming the field; a good one stored."""
    value = {"format": "avro", "schemaRegistry": {"url": "http://schema-registry.kafka.svc:8081"}}

    def spec_with(key: dict, with_value: bool = True, topics: int = 1) -> dict:
        spec = job_spec()
        source = spec["job"]["source"]
        source["key"] = key
        if with_value:
            source["value"] = {**value, "subject": "orders-value"}
        source["subscribe"] = ["orders", "returns"][:topics]
        return spec

    body = rejected(kube, ns, spec_with({"format": "avro"}, with_value=False))
    assert "spec.job.source.key" in body and "the value's schema registry" in body
    body = rejected(kube, ns, spec_with({"subject": "orders-key"}))
    assert "spec.job.source.key" in body and "only with key.format avro" in body
    inline = '{"type": "record", "name": "K", "fields": []}'
    body = rejected(kube, ns, spec_with({"format": "avro", "readerSchema": inline, "version": 1}))
    assert "spec.job.source.key.readerSchema" in body
    body = rejected(kube, ns, spec_with({"format": "json"}, topics=2))
    assert "spec.job.source.key" in body and "key.subject is required" in body
    created = kube.create_job(ns, "keyed", spec_with({"format": "json", "version": 2}))
    assert created["spec"]["job"]["source"]["key"] == {"format": "json", "version": 2}


def test_cel_rules_of_the_registry_options(kube: Kube, ns: str):
    """readerSchema, subjectStrategy/recordName and caSecret: each contradiction refused by the
    API server naming its field; good ones stored with their defaults."""
    http = {"url": "http://schema-registry.kafka.svc:8081"}
    https = {"url": "https://schema-registry.kafka.svc:8443"}
    inline = '{"type": "record", "name": "Order", "namespace": "shop", "fields": []}'

    def spec_with(value: dict, topics: tuple[str, ...] = ("orders",)) -> dict:
        spec = job_spec()
        spec["job"]["source"]["value"] = {"format": "avro", **value}
        spec["job"]["source"]["subscribe"] = list(topics)
        return spec

    refused = [
        ({"schemaRegistry": http, "readerSchema": inline, "version": 2}, ".readerSchema"),
        ({"schemaRegistry": http, "readerSchema": inline, "subject": "s"}, ".readerSchema"),
        (
            {"schemaRegistry": {**http, "subjectStrategy": "record", "recordName": "a.B"},
             "readerSchema": inline},
            ".readerSchema",
        ),
        ({"schemaRegistry": {**http, "subjectStrategy": "record"}}, ".schemaRegistry.recordName"),
        ({"schemaRegistry": {**http, "recordName": "shop.Order"}}, ".schemaRegistry.recordName"),
        ({"schemaRegistry": {**http, "caSecret": {"name": "ca"}}}, ".schemaRegistry.caSecret"),
    ]  # fmt: skip
    for value, field in refused:
        body = rejected(kube, ns, spec_with(value))
        assert f"spec.job.source.value{field}" in body, body
    # several topics: topic-record needs a subject; readerSchema and record do not
    topic_record = {**https, "subjectStrategy": "topic-record", "recordName": "shop.Order"}
    body = rejected(kube, ns, spec_with({"schemaRegistry": topic_record}, ("a", "b")))
    assert "value.subject is required" in body
    by_record = {**https, "subjectStrategy": "record", "recordName": "shop.Order"}
    kube.create_job(ns, "by-record", spec_with({"schemaRegistry": by_record}, ("a", "b")))
    created = kube.create_job(
        ns,
        "inline",
        spec_with(
            {"schemaRegistry": {**https, "caSecret": {"name": "ca"}}, "readerSchema": inline},
            ("a", "b"),
        ),
    )
    stored = created["spec"]["job"]["source"]["value"]
    assert stored["schemaRegistry"]["caSecret"] == {"name": "ca", "key": "ca.crt"}
    assert stored["readerSchema"] == inline


def test_cel_rules_of_protobuf_records(kube: Kube, ns: str):
    """value.messageName only with format protobuf (naming the field); a protobuf value with
    a message name and a .proto readerSchema (not JSON) stored as given."""
    registry = {"url": "http://schema-registry.kafka.svc:8081"}
    proto = 'syntax = "proto3";\npackage shop;\nmessage Order { int64 id = 1; }\n'

    def spec_with(value: dict) -> dict:
        spec = job_spec()
        spec["job"]["source"]["value"] = value
        return spec

    for fmt in ("avro", "json"):
        value = {"format": fmt, "schemaRegistry": registry, "messageName": "shop.Order"}
        body = rejected(kube, ns, spec_with(value))
        assert (
            "spec.job.source.value.messageName" in body
            and "only with value.format protobuf" in body
        )
    body = rejected(kube, ns, spec_with({"messageName": "shop.Order"}))
    assert "spec.job.source.value" in body and "value.messageName are used only" in body
    value = {"format": "protobuf", "schemaRegistry": registry, "messageName": "shop.Order"}
    created = kube.create_job(ns, "typed-proto", spec_with({**value, "readerSchema": proto}))
    stored = created["spec"]["job"]["source"]["value"]
    assert (stored["format"], stored["messageName"], stored["readerSchema"]) == (
        "protobuf",
        "shop.Order",
        proto,
    )


def test_defaults_are_applied(kube: Kube, ns: str):
    spec = job_spec()
    del spec["restartPolicy"]
    created = kube.create_job(ns, "defaults", spec)
    s = created["spec"]
    assert s["upgradeMode"] == "stateless" and s["suspend"] is False
    assert s["restartPolicy"]["type"] == "Always"
    assert s["restartPolicy"]["backoff"] == {"baseSeconds": 10, "capSeconds": 300}
    assert s["job"]["source"]["startingOffsets"] == "committed"
    assert "kafkaCredentials" not in s


def test_examples_are_accepted(kube: Kube, ns: str):
    import yaml

    from tests.integration.operator.kube_helpers import REPO

    for path in sorted((REPO / "examples").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "StreamingJob":
                kube.create_job(kube.namespace(), doc["metadata"]["name"], doc["spec"])


# --- bad input that the schema lets through: Invalid before any child exists ----------------
#
# Generated manifests of every kind of bad input seen in the field, applied to a real API
# server with the operator running: each is refused by the schema (422 naming the field) or
# reaches phase Invalid naming the field, with a Degraded/InvalidSpec condition and an
# InvalidSpec Event, and no child object (pod, Service, ConfigMap, account, budget) exists.

MIB = 1024 * 1024
GENERATED = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: the CI budget is tight
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def op(apiserver):
    with running_operator(apiserver.kubeconfig) as runner:
        yield runner
    if runner.exception is not None:
        raise runner.exception


@pytest.fixture(scope="module")
def gen_ns(kube: Kube) -> str:
    return kube.namespace()


def _set(spec: dict, dotted: str, value) -> dict:
    node = spec
    *parents, last = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return spec


BLANK = st.text(alphabet=" \t\n", min_size=1, max_size=3)
STRING_FIELDS = [
    ("image", "spec.image"),
    ("job.source.bootstrapServers", "spec.job.source.bootstrapServers"),
    ("job.source.groupId", "spec.job.source.groupId"),
    ("job.sink.path", "spec.job.sink.path"),
    ("checkpoint.location", "spec.checkpoint.location"),
]


@st.composite
def blank_strings(draw):
    dotted, field = draw(st.sampled_from([*STRING_FIELDS, ("job.sink.topic", "spec.job.sink")]))
    blank = draw(BLANK)
    value = draw(st.sampled_from([blank, f"{blank}x", f"x{blank}"]))
    spec = job_spec()
    if dotted == "job.sink.path":
        spec["job"]["sink"] = {"format": "parquet"}
    if dotted == "job.sink.topic":
        spec["job"]["sink"] = {"format": "kafka"}
    return _set(spec, dotted, value), field


@st.composite
def quantities(draw):
    role = draw(st.sampled_from(["driver", "executor"]))
    name = draw(st.sampled_from(["memory", "memoryOverhead", "cpuRequest", "cpuLimit"]))
    value = draw(
        st.sampled_from(["0", "1x", "1.5g", "-1", "0.0001", "1e3", "10Gi", "9" * 15, "256m"])
    )
    if name == "memoryOverhead" and value in ("0", "256m"):
        value = "1x"
    spec = job_spec(**{role: {name: value}})
    return spec, f"spec.{role}"


ENV = [
    ({"name": "A=B", "value": "x"}, "spec.env[0]"),  # (1.34 allows any printable ASCII)
    ({"name": "caf\u00e9", "value": "x"}, "spec.env[0]"),
    ({"name": "OK", "valu": "x"}, "spec.env[0]"),
    ({"name": "OK", "valueFrom": {"secretKeyRef": {"key": "k"}}}, "spec.env[0]"),
    ({"name": "OK", "value": 3}, "spec.env"),
]
VOLUMES = [
    ({"name": "Bad_Name", "emptyDir": {}}, "spec.volumes[0]"),
    ({"name": "data", "emptyDirr": {}}, "spec.volumes[0]"),
    ({"name": "data", "hostPath": {}}, "spec.volumes[0]"),
]
MOUNTS = [
    ({"name": "data", "mountPath": "relative"}, "spec.volumeMounts[0]"),
    ({"name": "data", "mountPath": "/d", "readOnlyy": True}, "spec.volumeMounts[0]"),
    ({"name": "data"}, "spec.volumeMounts[0]"),
]
TEMPLATES = [
    {"spec": {"priorityClassName": "Not Valid"}},
    {"spec": {"containers": [{"name": "sidecar"}]}},
    {"spec": {"nodeName": "a b"}},
    {"spec": {"unknownField": 1}},
    {"metadata": {"labels": {"bad key!": "v"}}},
    {"spec": {"dnsPolicy": "Sometimes"}},
]


@st.composite
def pod_content(draw):
    kind = draw(st.sampled_from(["env", "volumes", "volumeMounts", "podTemplate", "tolerations"]))
    spec = job_spec()
    if kind == "env":
        entry, field = draw(st.sampled_from(ENV))
        spec["env"] = [entry]
    elif kind == "volumes":
        entry, field = draw(st.sampled_from(VOLUMES))
        spec["volumes"] = [entry]
    elif kind == "volumeMounts":
        entry, field = draw(st.sampled_from(MOUNTS))
        spec["volumes"], spec["volumeMounts"] = [{"name": "data", "emptyDir": {}}], [entry]
    elif kind == "tolerations":
        spec["tolerations"] = [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}]
        field = "spec.tolerations"
    else:
        spec["podTemplate"], field = draw(st.sampled_from(TEMPLATES)), "spec.podTemplate"
    return spec, field


@st.composite
def starting_offsets(draw):
    value = draw(
        st.one_of(
            st.sampled_from(
                ['{"t":{"0":true}}', '{"":{"0":1}}', '{"t":{}}', "timestamp:", "newest", "{"]
            ),
            st.integers(2**63, 2**70).map(lambda n: f'{{"t":{{"0":{n}}}}}'),
            st.integers(2**31, 2**40).map(lambda n: f'{{"t":{{"{n}":1}}}}'),
        )
    )
    return _set(job_spec(), "job.source.startingOffsets", value), "spec.job.source.startingOffsets"


@st.composite
def locations(draw):
    value = draw(
        st.sampled_from(
            ["s3a://", "s3a://Upper/x", "file://relative", "s3a://b/a b", "s3a://b/x?y=1",
             "/tmp/a#b", "relative/path", "s3a://b/x:y", "hdfs:///x"]
        )
    )  # fmt: skip
    return _set(job_spec(), "checkpoint.location", value), "spec.checkpoint.location"


@st.composite
def spark_confs(draw):
    key = draw(
        st.sampled_from(
            [
                "spark.hadoop.fs.s3a.secret.key",
                "spark.hadoop.fs.s3a.access.key",
                "spark.authenticate.secret",
                "spark.ssl.keyStorePassword",
                "spark.kubernetes.driver.pod.name",
                "fs.s3a.endpoint",
                "spark.a b",
            ]
        )
    )
    value = draw(st.one_of(st.text(min_size=1, max_size=8), st.integers(), st.booleans()))
    return job_spec(sparkConf={key: value}), "spec.sparkConf"


@st.composite
def secrets_in_options(draw):
    key = draw(st.sampled_from(["sasl.password", "sasl.jaas.config", "ssl.key.password"]))
    spec = job_spec()
    if draw(st.booleans()):
        spec["job"]["source"]["kafka"] = {key: "hunter2"}
        return spec, f"spec.job.source.kafka['{key}']"
    spec["job"]["sink"] = {"format": "kafka", "topic": "out", "options": {key: "hunter2"}}
    return spec, f"spec.job.sink.options['{key}']"


@st.composite
def oversized(draw):
    # at most 1.2 MiB in all: the API server's storage refuses larger objects itself (500)
    big = "x" * draw(st.sampled_from([600 * 1024, MIB]))
    where = draw(
        st.sampled_from(
            [
                ("image", "spec.image"),
                ("job.source.groupId", "spec.job.source.groupId"),
                ("sparkConf", "spec.sparkConf"),
                ("env", "spec.env"),
                ("podTemplate", "spec.podTemplate"),
                ("restartPolicy.windowSeconds", "spec.restartPolicy.windowSeconds"),
                ("restartPolicy.backoff", "spec.restartPolicy.backoff"),
            ]
        )
    )
    dotted, field = where
    spec = job_spec()
    if dotted == "sparkConf":
        return job_spec(sparkConf={"spark.x": big}), field
    if dotted == "env":
        return job_spec(env=[{"name": "BIG", "value": big[: 600 * 1024]}]), field
    if dotted == "podTemplate":
        return job_spec(podTemplate={"metadata": {"annotations": {"a": big[: 600 * 1024]}}}), field
    if dotted == "restartPolicy.windowSeconds":
        return _set(spec, dotted, 10**15), field
    if dotted == "restartPolicy.backoff":
        return _set(spec, dotted, {"baseSeconds": 1e12, "capSeconds": 1e13}), field
    return _set(spec, dotted, big), field


INVALID = st.one_of(
    blank_strings(),
    quantities(),
    pod_content(),
    starting_offsets(),
    locations(),
    spark_confs(),
    secrets_in_options(),
    oversized(),
)


def _children(kube: Kube, ns: str, name: str) -> list[str]:
    selector = f"{LABEL_JOB}={label_value(name)}"
    found = [
        p.metadata.name for p in kube.core.list_namespaced_pod(ns, label_selector=selector).items
    ]
    found += [
        s.metadata.name
        for s in kube.core.list_namespaced_service(ns, label_selector=selector).items
    ]
    found += [
        c.metadata.name
        for c in kube.core.list_namespaced_config_map(ns, label_selector=selector).items
    ]
    found += [
        a.metadata.name
        for a in kube.core.list_namespaced_service_account(ns, label_selector=selector).items
    ]
    return found


def _refused_or_invalid(kube: Kube, ns: str, spec: dict, field: str) -> str:
    """'schema' or 'invalid'; fails the test when the manifest gets through."""
    name = f"gen-{uuid.uuid4().hex[:8]}"
    try:
        kube.create_job(ns, name, spec)
    except client.ApiException as exc:
        assert exc.status == 422, exc.body
        message = json.loads(exc.body)["message"]
        assert field.split("[")[0] in message, message[:2000]
        return "schema"
    status = wait_for(
        lambda: (s := kube.status(ns, name)).get("phase") == "Invalid" and s,
        30,
        f"{name} Invalid ({field})",
    )
    assert field in status["message"], status["message"]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "InvalidSpec"
    assert field in degraded["message"] and "fix:" in degraded["message"]
    events = wait_for(
        lambda: (
            kube.core.list_namespaced_event(
                ns, field_selector=f"involvedObject.name={name},reason=InvalidSpec"
            ).items
        ),
        30,
        f"InvalidSpec Event of {name}",
    )
    assert field in events[0].message
    assert _children(kube, ns, name) == []
    kube.delete_job(ns, name)
    return "invalid"


@GENERATED
@given(case=INVALID)
def test_generated_invalid_manifests_never_get_through(kube: Kube, op, gen_ns: str, case):
    spec, field = case
    _refused_or_invalid(kube, gen_ns, spec, field)


@GENERATED
@given(case=st.one_of(pod_content(), secrets_in_options(), spark_confs()))
def test_generated_free_form_and_credential_manifests_never_get_through(
    kube: Kube, op, gen_ns: str, case
):
    spec, field = case
    _refused_or_invalid(kube, gen_ns, spec, field)


_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,12}[a-z0-9])?", fullmatch=True)
NAMES = st.lists(_LABEL, min_size=1, max_size=20).map(".".join).filter(lambda n: len(n) <= 253)


@settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(name=st.one_of(st.just("orders.v2"), NAMES))
def test_every_valid_name_launches(kube: Kube, op, gen_ns: str, name: str):
    """orders.v2 once yielded an invalid Service name and never launched."""
    if kube.job(gen_ns, name) is not None:
        return
    kube.create_job(gen_ns, name, job_spec())
    wait_for(
        lambda: kube.status(gen_ns, name).get("launchState") == "Created",
        30,
        f"{name} launched",
    )
    assert service_name(name) in _children(kube, gen_ns, name)
    kube.delete_job(gen_ns, name)


def test_an_invalid_change_leaves_the_running_driver_alone_until_fixed(kube: Kube, op, ns: str):
    kube.create_job(ns, "change", job_spec())
    first = wait_for(lambda: kube.driver_names(ns), 30, "first driver")
    kube.set_running(ns, first[0])
    wait_for(lambda: kube.status(ns, "change").get("phase") == "Running", 30, "Running")
    kube.patch_spec(ns, "change", {"env": [{"name": "A=B", "value": "x"}]})
    status = wait_for(
        lambda: (s := kube.status(ns, "change")).get("phase") == "Invalid" and s, 30, "Invalid"
    )
    assert "spec.env[0]" in status["message"]
    assert kube.driver_names(ns) == first  # the running driver is not touched
    kube.patch_spec(ns, "change", {"env": [{"name": "GOOD", "value": "x"}]})
    wait_for(lambda: kube.driver_names(ns) == ["change-e1-a2-driver"], 30, "restart, fixed")


def test_a_missing_secret_is_invalid_until_created(kube: Kube, op, ns: str):
    kube.create_job(ns, "creds", job_spec(kafkaCredentials={"secretName": "kafka-creds"}))
    status = wait_for(
        lambda: (s := kube.status(ns, "creds")).get("phase") == "Invalid" and s, 30, "Invalid"
    )
    assert "spec.kafkaCredentials.secretName" in status["message"]
    assert _children(kube, ns, "creds") == []
    kube.core.create_namespaced_secret(
        ns,
        {"metadata": {"name": "kafka-creds"}, "stringData": {"username": "u", "password": "p"}},
    )
    wait_for(lambda: kube.driver_names(ns) == ["creds-e1-a1-driver"], 30, "launched")
    pod = kube.core.read_namespaced_pod("creds-e1-a1-driver", ns)
    args = " ".join(pod.spec.containers[0].args)
    assert "p" not in [a.split("=")[-1] for a in pod.spec.containers[0].args]
    assert "KAFKA_SASL_PASSWORD" in {e.name for e in pod.spec.containers[0].env}
    assert "password" not in args.lower()


def test_a_missing_registry_secret_is_invalid_until_created(kube: Kube, op, ns: str):
    """The schema registry's Secret goes down the same path as kafkaCredentials'; its login
    reaches the driver only as secretKeyRef env."""
    spec = job_spec()
    spec["job"]["source"]["value"] = {
        "format": "avro",
        "schemaRegistry": {
            "url": "http://schema-registry.kafka.svc:8081",
            "credentialsSecret": {"name": "registry-login"},
        },
    }
    kube.create_job(ns, "typed", spec)
    status = wait_for(
        lambda: (s := kube.status(ns, "typed")).get("phase") == "Invalid" and s, 30, "Invalid"
    )
    field = "spec.job.source.value.schemaRegistry.credentialsSecret.name"
    assert field in status["message"] and "registry-login" in status["message"]
    assert _children(kube, ns, "typed") == []
    kube.core.create_namespaced_secret(
        ns,
        {
            "metadata": {"name": "registry-login"},
            "stringData": {"username": "etl", "password": "reg-s3cret-pw"},
        },
    )
    wait_for(lambda: kube.driver_names(ns) == ["typed-e1-a1-driver"], 30, "launched")
    pod = kube.core.read_namespaced_pod("typed-e1-a1-driver", ns)
    container = pod.spec.containers[0]
    env = {e.name: e for e in container.env}
    ref = env["SCHEMA_REGISTRY_PASSWORD"].value_from.secret_key_ref
    assert (ref.name, ref.key) == ("registry-login", "password")
    assert env["SCHEMA_REGISTRY_PASSWORD"].value is None
    assert "reg-s3cret-pw" not in " ".join(container.args)


# --- bad input that used to reach a driver launch (tests/support/bad_input.py) ---------------
#
# One generated class at a time, ten manifests each: refused by the schema (422 naming the
# field) or Invalid naming it (condition, Event, no child); a watch over the namespace sees
# no driver pod created, ever, from the first manifest to the last.

BAD_INPUT = settings(GENERATED, max_examples=10, database=None)
CLASSES = classes(job_spec)


@pytest.fixture(scope="module")
def bad_input_ns(kube: Kube) -> Iterator[tuple[str, DriverWatch]]:
    ns = kube.namespace()
    with DriverWatch(kube, ns) as drivers:
        yield ns, drivers


@pytest.mark.parametrize("kind", sorted(CLASSES))
@BAD_INPUT
@given(data=st.data())
def test_generated_bad_input_never_launches_a_driver(
    kube: Kube, op, bad_input_ns: tuple[str, DriverWatch], kind: str, data
):
    ns, drivers = bad_input_ns
    spec, field = data.draw(CLASSES[kind])
    _refused_or_invalid(kube, ns, spec, field)
    assert drivers.created == []

"""Typed records in the job spec (spec.job.source.value, spec.job.deadLetter): the models and
their CRD rules, the source options they map to (the registry's credentials only from the
environment), the pods' secretKeyRef env and the Secret check before a launch."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from spark_app.api.dead_letter_spec import DEAD_LETTER_NEEDS_DECODED, DEAD_LETTER_NEEDS_GROUP
from spark_app.api.manifest import load_manifest
from spark_app.api.options import SourceOptions
from spark_app.api.registry_spec import CA_NEEDS_HTTPS, NEEDS_RECORD_NAME, RECORD_NAME_UNUSED
from spark_app.api.value_spec import (
    MESSAGE_NAME_PROTOBUF_ONLY,
    NEEDS_REGISTRY,
    READER_SCHEMA_ALONE,
    REGISTRY_ONLY,
    SUBJECT_NEEDED,
)
from spark_app.kafka.config import (
    ENV_REGISTRY_PASSWORD,
    ENV_REGISTRY_USERNAME,
    REGISTRY_CA_DIR,
    REGISTRY_CA_FILE,
    REGISTRY_CREDENTIAL_ENV,
    job_options,
)
from streamingjob_operator.api.crd import build_crd
from streamingjob_operator.children.cleanup import build_cleanup_job
from streamingjob_operator.children.driver_pod import (
    build_driver_pod,
    build_executor_template,
    build_job_configmap,
    spark_confs,
)
from streamingjob_operator.children.pod_parts import REGISTRY_CA_VOLUME, secret_references
from streamingjob_operator.children.validation import check_secrets, check_source, parse
from streamingjob_operator.rules.epochs import job_hash, pod_hash
from streamingjob_operator.rules.launch import Launch
from tests.unit.operator.helpers_operator import BASE_SPEC, make_spec

pytestmark = pytest.mark.unit

PASSWORD = "reg-s3cret-pw"  # a value no manifest, argument or conf may ever hold
REGISTRY = {
    "url": "https://schema-registry.kafka.svc:8081/apis/ccompat/v7",
    "credentialsSecret": {"name": "registry-login", "passwordKey": "pw"},
    "timeoutSeconds": 5,
}
AVRO = {"format": "avro", "schemaRegistry": REGISTRY}
ENV = {ENV_REGISTRY_USERNAME: "etl", ENV_REGISTRY_PASSWORD: PASSWORD}


def _spec(value: dict[str, Any] | None = None, **job: Any) -> dict[str, Any]:
    spec = copy.deepcopy(BASE_SPEC)
    if value is not None:
        spec["job"]["source"]["value"] = value
    spec["job"].update(job)
    return spec


READER = "spec.job.source.value.readerSchema"
REG = "spec.job.source.value.schemaRegistry"
INLINE = '{"type": "record", "name": "Order", "namespace": "shop", "fields": []}'
BY_RECORD = {"subjectStrategy": "record", "recordName": "shop.Order"}


def _problems(spec: dict[str, Any]) -> list[tuple[str, str]]:
    parsed, problems = parse(spec)
    assert parsed is None
    return [(p.field, p.message) for p in problems]


def test_a_typed_records_spec_maps_to_the_sources_options():
    spec = make_spec(job__source__value=AVRO, job__deadLetter={"topic": "orders-dead"})
    options = job_options(spec.job, env={})
    assert options["valueFormat"] == "avro"
    assert options["schemaRegistryUrl"] == REGISTRY["url"]
    assert options["schemaRegistryTimeoutMs"] == "5000"
    assert options["deadLetterTopic"] == "orders-dead"
    assert "deadLetterBootstrapServers" not in options  # the source's
    assert "valueSubject" not in options and "valueSchemaVersion" not in options
    parsed = SourceOptions.parse(options)
    assert parsed.value_decoding is not None
    assert parsed.value_decoding.subject == "orders-value"  # <topic>-value
    assert parsed.value_decoding.version == "latest"
    assert parsed.value_decoding.registry_timeout_ms == 5000
    assert parsed.dead_letter is not None and parsed.dead_letter.topic == "orders-dead"
    assert check_source(spec) == []


def test_a_json_schema_spec_maps_to_the_sources_json_options():
    spec = make_spec(
        job__source__value={**AVRO, "format": "json"}, job__deadLetter={"topic": "orders-dead"}
    )
    options = job_options(spec.job, env={})
    assert options["valueFormat"] == "json"
    parsed = SourceOptions.parse(options)
    assert parsed.value_decoding is not None and parsed.value_decoding.format == "json"
    assert parsed.value_decoding.subject == "orders-value"  # <topic>-value, as with avro
    assert parsed.dead_letter is not None and parsed.dead_letter.topic == "orders-dead"
    assert check_source(spec) == []


def test_a_pinned_subject_version_and_another_dead_letter_cluster():
    value = {**AVRO, "subject": "orders-v2", "version": 3}
    spec = make_spec(
        job__source__value=value,
        job__deadLetter={"topic": "dead", "bootstrapServers": "dlq:9092"},
    )
    options = job_options(spec.job, env={})
    assert options["valueSubject"] == "orders-v2" and options["valueSchemaVersion"] == "3"
    assert options["deadLetterBootstrapServers"] == "dlq:9092"
    decoding = SourceOptions.parse(options).value_decoding
    assert decoding is not None and (decoding.subject, decoding.version) == ("orders-v2", 3)


def test_the_registry_credentials_come_only_from_the_environment():
    spec = make_spec(job__source__value=AVRO)
    without = job_options(spec.job, env={})
    assert not set(REGISTRY_CREDENTIAL_ENV.values()) & set(without)
    options = job_options(spec.job, env=ENV)
    assert options["schemaRegistryUser"] == "etl"
    assert options["schemaRegistryPassword"] == PASSWORD
    decoding = SourceOptions.parse(options).value_decoding
    assert decoding is not None and decoding.password == PASSWORD
    assert PASSWORD not in repr(decoding)
    # a raw job reads no registry variables (they would be refused without avro)
    assert "schemaRegistryUser" not in job_options(make_spec().job, env=ENV)
    # the manifest holds the Secret's name, never a value
    assert PASSWORD not in yaml.safe_dump(spec.model_dump(mode="json", by_alias=True))


@pytest.mark.parametrize(
    ("value", "job", "field", "message"),
    [
        ({"format": "avro"}, {}, "spec.job.source.value", NEEDS_REGISTRY),
        ({"format": "json"}, {}, "spec.job.source.value", NEEDS_REGISTRY),
        ({"subject": "orders-value"}, {}, "spec.job.source.value", REGISTRY_ONLY),
        ({"schemaRegistry": REGISTRY}, {}, "spec.job.source.value", REGISTRY_ONLY),
        ({"format": "raw", "version": 2}, {}, "spec.job.source.value", REGISTRY_ONLY),
        (None, {"deadLetter": {"topic": "dead"}}, "spec.job", DEAD_LETTER_NEEDS_DECODED),
        (
            {"format": "raw"},
            {"deadLetter": {"topic": "dead"}},
            "spec.job",
            DEAD_LETTER_NEEDS_DECODED,
        ),
        (AVRO, {"deadLetter": {}}, "spec.job.deadLetter.topic", "Field required"),
        (AVRO, {"deadLetter": {"topic": ".."}}, "spec.job.deadLetter.topic", "pattern"),
        ({**AVRO, "version": 0}, {}, "spec.job.source.value.version", "greater than or equal to 1"),
        (
            {**AVRO, "format": "xml"},
            {},
            "spec.job.source.value.format",
            "'raw', 'avro', 'json' or 'protobuf'",
        ),
        (
            {
                "format": "avro",
                "schemaRegistry": {"url": "https" + "://user:pw@schema-registry.kafka.svc:8081"},
            },
            {},
            "spec.job.source.value.schemaRegistry.url",
            "pattern",
        ),
        (
            {"format": "avro", "schemaRegistry": {"url": "ftp://registry:8081"}},
            {},
            "spec.job.source.value.schemaRegistry.url",
            "pattern",
        ),
        (
            {**AVRO, "schemaRegistry": {**REGISTRY, "timeoutSeconds": 0}},
            {},
            "spec.job.source.value.schemaRegistry.timeoutSeconds",
            "greater than or equal to 1",
        ),
        (
            {**AVRO, "schemaRegistry": {"url": "http://r.svc:8081", "credentialsSecret": {}}},
            {},
            "spec.job.source.value.schemaRegistry.credentialsSecret.name",
            "Field required",
        ),
        ({**AVRO, "readerSchema": "{oops"}, {}, f"{READER}", "is not JSON"),
        ({**AVRO, "readerSchema": '"long"'}, {}, f"{READER}", "must be an Avro record schema"),
        ({**AVRO, "readerSchema": INLINE, "version": 2}, {}, f"{READER}", READER_SCHEMA_ALONE),
        ({**AVRO, "readerSchema": INLINE, "subject": "s"}, {}, f"{READER}", READER_SCHEMA_ALONE),
        (
            {**AVRO, "readerSchema": INLINE, "schemaRegistry": {**REGISTRY, **BY_RECORD}},
            {},
            f"{READER}",
            READER_SCHEMA_ALONE,
        ),
        ({"readerSchema": INLINE}, {}, "spec.job.source.value", REGISTRY_ONLY),
        (
            {**AVRO, "schemaRegistry": {**REGISTRY, "subjectStrategy": "topic-record"}},
            {},
            REG,
            NEEDS_RECORD_NAME,
        ),
        (
            {**AVRO, "schemaRegistry": {**REGISTRY, "recordName": "shop.Order"}},
            {},
            REG,
            RECORD_NAME_UNUSED,
        ),
        (
            {**AVRO, "schemaRegistry": {**REGISTRY, **BY_RECORD, "recordName": "shop.1Order"}},
            {},
            f"{REG}.recordName",
            "pattern",
        ),
        (
            {**AVRO, "schemaRegistry": {**REGISTRY, "subjectStrategy": "name"}},
            {},
            f"{REG}.subjectStrategy",
            "'topic', 'record' or 'topic-record'",
        ),
        (
            {**AVRO, "schemaRegistry": {"url": "http://r.svc:8081", "caSecret": {"name": "ca"}}},
            {},
            f"{REG}.caSecret",
            CA_NEEDS_HTTPS,
        ),
    ],
)
def test_bad_typed_records_specs_are_refused_naming_the_field(value, job, field, message):
    problems = _problems(_spec(value, **job))
    assert any(f == field and message in m for f, m in problems), problems


def test_the_subject_is_required_unless_one_topic_is_subscribed():
    for source in (
        {"subscribe": ["orders", "returns"]},
        {"subscribe": None, "subscribePattern": "orders.*"},
    ):
        spec = _spec(AVRO)
        spec["job"]["source"].update(source)
        if spec["job"]["source"]["subscribe"] is None:
            del spec["job"]["source"]["subscribe"]
        assert ("spec.job.source", SUBJECT_NEEDED) in _problems(spec)
        spec["job"]["source"]["value"] = {**AVRO, "subject": "orders-value"}
        assert parse(spec)[1] == []


def test_an_inline_reader_schema_or_the_record_strategy_need_no_single_topic():
    spec = _spec({**AVRO, "readerSchema": INLINE})
    spec["job"]["source"]["subscribe"] = ["orders", "returns"]
    parsed, problems = parse(spec)
    assert parsed is not None, problems
    options = job_options(parsed.job, env={})
    assert options["valueSchema"] == INLINE and "valueSubject" not in options
    decoding = SourceOptions.parse(options).value_decoding
    assert decoding is not None and decoding.reader_schema == INLINE and decoding.subject is None
    spec["job"]["source"]["value"] = {**AVRO, "schemaRegistry": {**REGISTRY, **BY_RECORD}}
    parsed, problems = parse(spec)
    assert parsed is not None, problems
    options = job_options(parsed.job, env={})
    assert (options["valueSubjectStrategy"], options["valueRecordName"]) == ("record", "shop.Order")
    decoding = SourceOptions.parse(options).value_decoding
    assert decoding is not None and decoding.subject == "shop.Order"
    # topic-record names the one topic too: with two it needs value.subject
    topic_record = {**REGISTRY, **BY_RECORD, "subjectStrategy": "topic-record"}
    spec["job"]["source"]["value"] = {**AVRO, "schemaRegistry": topic_record}
    assert ("spec.job.source", SUBJECT_NEEDED) in _problems(spec)
    spec["job"]["source"]["subscribe"] = ["orders"]
    parsed, problems = parse(spec)
    assert parsed is not None, problems
    decoding = SourceOptions.parse(job_options(parsed.job, env={})).value_decoding
    assert decoding is not None and decoding.subject == "orders-shop.Order"


def test_a_dead_letter_topic_needs_the_group():
    spec = _spec(AVRO, deadLetter={"topic": "dead"})
    source = spec["job"]["source"]
    del source["groupId"]
    source.update(startingOffsets="earliest", commitOffsetsOnCheckpoints=False)
    assert ("spec.job", DEAD_LETTER_NEEDS_GROUP) in _problems(spec)


def _schema(crd: dict[str, Any], *path: str) -> dict[str, Any]:
    node = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for part in path:
        node = node["properties"][part]
    return node


def test_the_crd_carries_the_rules_and_documents_every_field():
    crd = build_crd()
    value = _schema(crd, "spec", "job", "source", "value")
    assert {r["message"] for r in value["x-kubernetes-validations"]} == {
        NEEDS_REGISTRY,
        REGISTRY_ONLY,
        READER_SCHEMA_ALONE,
        MESSAGE_NAME_PROTOBUF_ONLY,
    }
    source = _schema(crd, "spec", "job", "source")
    assert SUBJECT_NEEDED in {r["message"] for r in source["x-kubernetes-validations"]}
    job = _schema(crd, "spec", "job")
    rules = {r["message"]: r for r in job["x-kubernetes-validations"]}
    assert rules[DEAD_LETTER_NEEDS_DECODED]["fieldPath"] == ".deadLetter"
    assert DEAD_LETTER_NEEDS_GROUP in rules
    assert _schema(crd, "spec", "job", "deadLetter")["required"] == ["topic"]
    registry = _schema(crd, "spec", "job", "source", "value", "schemaRegistry")
    assert registry["required"] == ["url"]
    assert registry["properties"]["url"]["pattern"].startswith("^https?://")
    secret = registry["properties"]["credentialsSecret"]["properties"]
    assert secret["usernameKey"]["default"] == "username"
    assert secret["passwordKey"]["default"] == "password"
    rules = {r["message"]: r["fieldPath"] for r in registry["x-kubernetes-validations"]}
    assert rules == {
        NEEDS_RECORD_NAME: ".recordName",
        RECORD_NAME_UNUSED: ".recordName",
        CA_NEEDS_HTTPS: ".caSecret",
    }
    assert registry["properties"]["subjectStrategy"]["enum"] == ["topic", "record", "topic-record"]
    assert registry["properties"]["caSecret"]["properties"]["key"]["default"] == "ca.crt"
    for node in (value, registry, job["properties"]["deadLetter"]):
        for name, prop in node["properties"].items():
            assert prop.get("description"), name


JOB = {
    "apiVersion": "sparkkafka.dev/v1alpha1",
    "kind": "StreamingJob",
    "metadata": {"name": "orders", "namespace": "team", "uid": "uid-1", "generation": 1},
    "spec": _spec(AVRO, deadLetter={"topic": "orders-dead"}),
    "status": {"epoch": 1},
}
SPEC = make_spec(job__source__value=AVRO, job__deadLetter={"topic": "orders-dead"})
POD = "orders-e1-a1-driver"
LAUNCH = Launch(POD, epoch=1, attempt=1, checkpoint_location="s3a://c/x")


def test_registry_credentials_reach_driver_and_executors_only_by_secret_ref():
    driver = build_driver_pod(JOB, SPEC, LAUNCH)["spec"]["containers"][0]
    executor = build_executor_template(SPEC, "orders")["spec"]["containers"][0]
    for container in (driver, executor):
        env = {e["name"]: e for e in container["env"]}
        assert env[ENV_REGISTRY_USERNAME] == {
            "name": ENV_REGISTRY_USERNAME,
            "valueFrom": {"secretKeyRef": {"name": "registry-login", "key": "username"}},
        }
        assert env[ENV_REGISTRY_PASSWORD] == {
            "name": ENV_REGISTRY_PASSWORD,
            "valueFrom": {"secretKeyRef": {"name": "registry-login", "key": "pw"}},
        }
    # nothing of the registry's login in the arguments, the Spark confs or the ConfigMap
    shown = [
        " ".join(driver["args"]),
        yaml.safe_dump(spark_confs(JOB, SPEC, POD, 1, 1)),
        yaml.safe_dump(build_job_configmap(JOB, SPEC)["data"]["job.yaml"]),
    ]
    for text in shown:
        assert "schemaRegistryPassword" not in text and "schemaRegistryUser" not in text
        assert "SCHEMA_REGISTRY_" not in text and PASSWORD not in text
    # the cleanup Job reads no registry
    cleanup = build_cleanup_job(JOB, SPEC, ["s3a://c/team/orders"], "orders-cleanup")
    (c,) = cleanup["spec"]["template"]["spec"]["containers"]
    assert not any(e["name"].startswith("SCHEMA_REGISTRY_") for e in c["env"])
    # without credentialsSecret: no variables at all
    plain = make_spec(
        job__source__value={"format": "avro", "schemaRegistry": {"url": "http://r.svc:1"}}
    )
    env = build_executor_template(plain, "orders")["spec"]["containers"][0]["env"]
    assert not any(e["name"].startswith("SCHEMA_REGISTRY_") for e in env)


def test_the_runner_reads_the_configmaps_manifest_with_the_pods_environment():
    manifest = load_manifest(yaml.safe_load(build_job_configmap(JOB, SPEC)["data"]["job.yaml"]))
    options = job_options(manifest.spec.job, env=ENV)
    assert options["schemaRegistryPassword"] == PASSWORD
    assert options["deadLetterTopic"] == "orders-dead"


def test_the_registry_secret_is_checked_before_a_launch():
    field = "spec.job.source.value.schemaRegistry.credentialsSecret"
    assert (
        f"{field}.name",
        "registry-login",
        {f"{field}.usernameKey": "username", f"{field}.passwordKey": "pw"},
    ) in secret_references(SPEC)
    (missing,) = check_secrets(SPEC, "team", lambda ns, name: None)
    assert missing.field == f"{field}.name" and "'registry-login' not found" in missing.message
    (no_key,) = check_secrets(SPEC, "team", lambda ns, name: {"username": "u"})
    assert no_key.field == f"{field}.passwordKey" and "no key 'pw'" in no_key.message


def test_unset_typed_records_fields_keep_the_hashes_and_set_ones_redeploy():
    """An operator upgrade restarts no job: the hashes of a spec without the new fields are
    those the released operator recorded (its values for this spec)."""
    before = make_spec()
    assert (job_hash(before), pod_hash(before)) == ("fc974e0bacd157e4", "25d83883152cdde8")
    raw = make_spec(job__source__value={"format": "raw"})
    typed = make_spec(job__source__value=AVRO)
    assert job_hash(raw) != job_hash(before)  # a set field is hashed, even at its default
    assert job_hash(typed) != job_hash(before) and pod_hash(typed) == pod_hash(before)
    written = make_spec(job__source__value=AVRO, job__sink={"format": "kafka", "topic": "out"})
    typed_out = make_spec(
        job__source__value=AVRO,
        job__sink={"format": "kafka", "topic": "out", "value": {"format": "avro"}},
    )
    assert job_hash(typed_out) != job_hash(written)  # how the job writes: a redeploy
    data = before.model_dump(mode="json", by_alias=True)
    assert data["job"]["source"]["value"] is None and data["job"]["deadLetter"] is None


TLS_REGISTRY = {
    "url": "https://schema-registry.kafka.svc:8443/apis/ccompat/v7",
    "caSecret": {"name": "registry-ca", "key": "root.pem"},
}


def test_the_registry_ca_is_mounted_in_driver_and_executors_and_named_by_the_option():
    spec = make_spec(job__source__value={"format": "avro", "schemaRegistry": TLS_REGISTRY})
    job = {**JOB, "spec": _spec({"format": "avro", "schemaRegistry": TLS_REGISTRY})}
    driver = build_driver_pod(job, spec, LAUNCH)["spec"]
    executor = build_executor_template(spec, "orders")["spec"]
    for pod in (driver, executor):
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes[REGISTRY_CA_VOLUME]["secret"] == {
            "secretName": "registry-ca",
            "items": [{"key": "root.pem", "path": "ca.crt"}],
            "defaultMode": 0o444,
        }
        mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
        assert mounts[REGISTRY_CA_VOLUME] == {
            "name": REGISTRY_CA_VOLUME,
            "mountPath": REGISTRY_CA_DIR,
            "readOnly": True,
        }
    options = job_options(spec.job, env={})
    assert options["schemaRegistryCaFile"] == REGISTRY_CA_FILE == f"{REGISTRY_CA_DIR}/ca.crt"
    assert "registry-ca" not in " ".join(driver["containers"][0]["args"])
    # the Secret is checked before a launch like the others
    assert (
        "spec.job.source.value.schemaRegistry.caSecret.name",
        "registry-ca",
        {"spec.job.source.value.schemaRegistry.caSecret.key": "root.pem"},
    ) in secret_references(spec)
    # no caSecret: no volume
    plain = build_executor_template(SPEC, "orders")["spec"]
    assert REGISTRY_CA_VOLUME not in {v["name"] for v in plain["volumes"]}

"""spec.job.source.key: the key's format and reader schema with the value's registry; the
models, their CRD rules and the source options they map to."""

from __future__ import annotations

from typing import Any

import pytest

from spark_app.api.key_spec import (
    KEY_NEEDS_REGISTRY,
    KEY_READER_SCHEMA_ALONE,
    KEY_SUBJECT_NEEDED,
    KEY_SUBJECT_ONLY,
)
from spark_app.api.options import SourceOptions
from spark_app.kafka.config import job_options
from streamingjob_operator.api.crd import build_crd
from streamingjob_operator.children.validation import parse
from streamingjob_operator.rules.epochs import job_hash, pod_hash
from tests.unit.operator.api.test_typed_spec import AVRO, INLINE, _problems, _schema, _spec
from tests.unit.operator.helpers_operator import make_spec

pytestmark = pytest.mark.unit


def _with_key(key: dict[str, Any], value: dict[str, Any] | None = AVRO) -> dict[str, Any]:
    spec = _spec(value)
    spec["job"]["source"]["key"] = key
    return spec


def _options(spec: dict[str, Any]) -> dict[str, str]:
    parsed, problems = parse(spec)
    assert parsed is not None, problems
    return job_options(parsed.job, env={})


def test_a_decoded_key_maps_to_the_key_options_with_the_values_registry():
    options = _options(_with_key({"format": "avro"}))
    assert options["keyFormat"] == "avro" and "keySubject" not in options
    parsed = SourceOptions.parse(options)
    key, value = parsed.key_decoding, parsed.value_decoding
    assert key is not None and value is not None
    assert (key.subject, key.version) == ("orders-key", "latest")  # <topic>-key
    assert key.registry_url == value.registry_url and key.registry_timeout_ms == 5000
    pinned = _options(_with_key({"format": "json", "subject": "k", "version": 2}))
    assert (pinned["keyFormat"], pinned["keySubject"], pinned["keySchemaVersion"]) == (
        "json",
        "k",
        "2",
    )
    inline = _options(_with_key({"format": "avro", "readerSchema": INLINE}))
    assert inline["keySchema"] == INLINE


def test_a_raw_or_unset_key_adds_no_options():
    assert not any(k.startswith("key") for k in _options(_spec(AVRO)))
    assert not any(k.startswith("key") for k in _options(_with_key({"format": "raw"})))


KEY = "spec.job.source.key"


@pytest.mark.parametrize(
    ("key", "value", "field", "message"),
    [
        ({"format": "avro"}, None, "spec.job.source", KEY_NEEDS_REGISTRY),
        ({"subject": "k"}, AVRO, KEY, KEY_SUBJECT_ONLY),
        (
            {"format": "avro", "readerSchema": INLINE, "version": 1},
            AVRO,
            f"{KEY}.readerSchema",
            KEY_READER_SCHEMA_ALONE,
        ),
        (
            {"format": "avro", "readerSchema": '"long"'},
            AVRO,
            f"{KEY}.readerSchema",
            "the key column",
        ),
        ({"format": "xml"}, AVRO, f"{KEY}.format", "Input should be"),
    ],
)
def test_bad_key_specs_are_refused_naming_the_field(key, value, field, message):
    problems = _problems(_with_key(key, value))
    assert any(f == field and message in m for f, m in problems), problems


def test_the_key_subject_is_required_unless_one_topic_or_an_inline_schema():
    spec = _with_key({"format": "avro"}, {**AVRO, "subject": "orders-value"})
    spec["job"]["source"]["subscribe"] = ["orders", "returns"]
    assert ("spec.job.source", KEY_SUBJECT_NEEDED) in _problems(spec)
    spec["job"]["source"]["key"] = {"format": "avro", "subject": "orders-key"}
    assert parse(spec)[1] == []
    spec["job"]["source"]["key"] = {"format": "avro", "readerSchema": INLINE}
    assert parse(spec)[1] == []


def test_the_crd_carries_the_key_rules_and_documents_its_fields():
    crd = build_crd()
    key = _schema(crd, "spec", "job", "source", "key")
    assert {r["message"] for r in key["x-kubernetes-validations"]} == {
        KEY_SUBJECT_ONLY,
        KEY_READER_SCHEMA_ALONE,
    }
    assert key["properties"]["format"]["enum"][:3] == ["raw", "avro", "json"]
    for name, prop in key["properties"].items():
        assert prop.get("description"), name
    source = _schema(crd, "spec", "job", "source")
    rules = {r["message"]: r.get("fieldPath") for r in source["x-kubernetes-validations"]}
    assert rules[KEY_NEEDS_REGISTRY] == ".key" and rules[KEY_SUBJECT_NEEDED] == ".key"


def test_an_unset_key_keeps_the_hashes_and_a_set_one_redeploys():
    before = make_spec(job__source__value=AVRO)
    keyed = make_spec(job__source__value=AVRO, job__source__key={"format": "avro"})
    assert job_hash(keyed) != job_hash(before) and pod_hash(keyed) == pod_hash(before)
    data = before.model_dump(mode="json", by_alias=True)
    assert data["job"]["source"]["key"] is None  # dropped from the hash while unset

"""Protobuf typed records in the job spec (spec.job.source.value.format protobuf and
value.messageName): the models and their CRD rules, the source options they map to
(valueFormat=protobuf, valueMessageName), and the options' own errors. Decoding:
tests/unit/spark_app/formats/test_protobuf_values.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from spark_app.api.option_values import OptionError
from spark_app.api.options import SourceOptions
from spark_app.api.value_spec import MESSAGE_NAME_PROTOBUF_ONLY, READER_SCHEMA_ALONE, REGISTRY_ONLY
from spark_app.kafka.config import job_options
from streamingjob_operator.api.crd import build_crd
from streamingjob_operator.children.validation import check_source, parse
from tests.unit.operator.helpers_operator import BASE_SPEC, make_spec

pytestmark = pytest.mark.unit

REGISTRY = {"url": "http://schema-registry.kafka.svc:8081/apis/ccompat/v7"}
PROTOBUF = {"format": "protobuf", "schemaRegistry": REGISTRY}
PROTO = 'syntax = "proto3";\npackage shop;\nmessage Order { int64 id = 1; }\n'
VALUE = "spec.job.source.value"
OPTIONS = {
    "kafka.bootstrap.servers": "b:9092",
    "subscribe": "orders",
    "kafka.group.id": "g",
    "valueFormat": "protobuf",
    "schemaRegistryUrl": REGISTRY["url"],
}


def _spec(value: dict[str, Any], **job: Any) -> dict[str, Any]:
    spec = copy.deepcopy(BASE_SPEC)
    spec["job"]["source"]["value"] = value
    spec["job"].update(job)
    return spec


def _problems(spec: dict[str, Any]) -> list[tuple[str, str]]:
    parsed, problems = parse(spec)
    assert parsed is None
    return [(p.field, p.message) for p in problems]


def test_a_protobuf_spec_maps_to_the_sources_protobuf_options():
    spec = make_spec(
        job__source__value={**PROTOBUF, "messageName": "shop.Order"},
        job__deadLetter={"topic": "orders-dead"},
    )
    options = job_options(spec.job, env={})
    assert (options["valueFormat"], options["valueMessageName"]) == ("protobuf", "shop.Order")
    parsed = SourceOptions.parse(options)
    decoding = parsed.value_decoding
    assert decoding is not None and decoding.format == "protobuf"
    assert (decoding.subject, decoding.message_name) == ("orders-value", "shop.Order")
    assert parsed.dead_letter is not None and parsed.dead_letter.topic == "orders-dead"
    assert check_source(spec) == []
    # unset: no option; the reader takes the schema's first message
    options = job_options(make_spec(job__source__value=PROTOBUF).job, env={})
    assert "valueMessageName" not in options
    decoding = SourceOptions.parse(options).value_decoding
    assert decoding is not None and decoding.message_name is None


def test_the_record_strategys_name_is_the_message_unless_one_is_named():
    by_record = {**REGISTRY, "subjectStrategy": "record", "recordName": "shop.Order"}
    spec = make_spec(job__source__value={**PROTOBUF, "schemaRegistry": by_record})
    decoding = SourceOptions.parse(job_options(spec.job, env={})).value_decoding
    assert decoding is not None
    assert (decoding.subject, decoding.message_name) == ("shop.Order", "shop.Order")
    named = {**PROTOBUF, "schemaRegistry": by_record, "messageName": "shop.Refund"}
    decoding = SourceOptions.parse(
        job_options(make_spec(job__source__value=named).job, env={})
    ).value_decoding
    assert decoding is not None
    assert (decoding.subject, decoding.message_name) == ("shop.Order", "shop.Refund")


def test_an_inline_proto_reader_schema_is_taken_as_proto_text():
    spec = _spec({**PROTOBUF, "readerSchema": PROTO, "messageName": "shop.Order"})
    spec["job"]["source"]["subscribe"] = ["orders", "returns"]  # no subject: any topics
    parsed, problems = parse(spec)
    assert parsed is not None, problems
    options = job_options(parsed.job, env={})
    assert options["valueSchema"] == PROTO
    decoding = SourceOptions.parse(options).value_decoding
    assert decoding is not None and decoding.reader_schema == PROTO and decoding.subject is None
    assert check_source(parsed) == []


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        ({**PROTOBUF, "format": "avro", "messageName": "shop.Order"}, VALUE, "messageName"),
        ({**PROTOBUF, "format": "json", "messageName": "a.B"}, VALUE, "messageName is used only"),
        ({"messageName": "shop.Order"}, VALUE, REGISTRY_ONLY),
        ({**PROTOBUF, "messageName": "shop.1Order"}, f"{VALUE}.messageName", "pattern"),
        ({**PROTOBUF, "messageName": ""}, f"{VALUE}.messageName", "at least 1 character"),
        (
            {**PROTOBUF, "readerSchema": PROTO, "version": 2},
            f"{VALUE}.readerSchema",
            READER_SCHEMA_ALONE,
        ),
        ({"format": "protobuf"}, VALUE, "required when value.format is avro, json or protobuf"),
    ],
)
def test_bad_protobuf_specs_are_refused_naming_the_field(value, field, message):
    problems = _problems(_spec(value))
    assert any(f == field and message in m for f, m in problems), problems


def test_the_messages_name_the_fix():
    assert "set value.format: protobuf or remove messageName" in MESSAGE_NAME_PROTOBUF_ONLY
    assert "value.messageName" in REGISTRY_ONLY
    assert "remove value.version" in READER_SCHEMA_ALONE


def test_the_crd_has_the_format_and_the_message_name_with_its_rule():
    crd = build_crd()
    node = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for part in ("spec", "job", "source", "value"):
        node = node["properties"][part]
    assert "protobuf" in node["properties"]["format"]["enum"]
    message = node["properties"]["messageName"]
    assert message["pattern"].startswith("^[A-Za-z_]") and "first message" in message["description"]
    rules = {r["message"]: r for r in node["x-kubernetes-validations"]}
    rule = rules[MESSAGE_NAME_PROTOBUF_ONLY]
    assert rule["fieldPath"] == ".messageName" and "'protobuf'" in rule["rule"]
    assert "has(self.messageName)" in rules[REGISTRY_ONLY]["rule"]


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ({"valueMessageName": "1shop.Order"}, r"valueMessageName='1shop\.Order' is not a Protobuf"),
        ({"valueFormat": "avro", "valueMessageName": "a.B"}, "used only with valueFormat=protobuf"),
        ({"valueFormat": "raw", "valueMessageName": "a.B", "schemaRegistryUrl": None}, "used only"),
        ({"subscribe": "a,b"}, "valueSubject is required with valueFormat=protobuf unless"),
        ({"schemaRegistryUrl": None}, "schemaRegistryUrl is required with valueFormat=protobuf"),
    ],
)
def test_bad_protobuf_options_name_the_option(extra, error):
    options = {k: v for k, v in {**OPTIONS, **extra}.items() if v is not None}
    with pytest.raises(OptionError, match=error):
        SourceOptions.parse(options)


def test_protobuf_options_take_proto_text_inline_and_a_message_name():
    options = {**OPTIONS, "valueSchema": PROTO, "valueMessageName": "shop.Order"}
    decoding = SourceOptions.parse(options).value_decoding
    assert decoding is not None
    assert (decoding.reader_schema, decoding.message_name) == (PROTO, "shop.Order")
    assert "message Order" not in repr(decoding)  # long text: never in a repr

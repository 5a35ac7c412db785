"""The schema registry the integration tier starts is a real Confluent-compatible server:
schemas registered through its API come back by the id a producer writes into each record."""

from __future__ import annotations

import json
import urllib.error
import uuid

import pytest

from devbed.schema_registry import SchemaRegistry

pytestmark = pytest.mark.integration

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "test.registry",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}
# v2 adds a field with a default: BACKWARD compatible, as a producer's evolution would be.
ORDER_V2 = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}],
}


def _subject() -> str:
    return f"orders-{uuid.uuid4().hex[:8]}-value"


def test_an_avro_schema_registered_comes_back_by_its_id(schema_registry: SchemaRegistry) -> None:
    subject = _subject()
    schema_id = schema_registry.register(subject, ORDER_V1)
    by_id = schema_registry.call("GET", f"/schemas/ids/{schema_id}")
    assert json.loads(by_id["schema"]) == ORDER_V1
    assert by_id.get("schemaType", "AVRO") == "AVRO"
    # The same schema again is the same id: a producer's re-registration changes nothing.
    assert schema_registry.register(subject, ORDER_V1) == schema_id


def test_an_evolved_schema_is_a_new_id_and_the_latest_version(
    schema_registry: SchemaRegistry,
) -> None:
    subject = _subject()
    v1 = schema_registry.register(subject, ORDER_V1)
    v2 = schema_registry.register(subject, ORDER_V2)
    assert v2 != v1
    latest = schema_registry.call("GET", f"/subjects/{subject}/versions/latest")
    assert (latest["id"], latest["version"]) == (v2, 2)
    first = schema_registry.call("GET", f"/subjects/{subject}/versions/1")
    assert json.loads(first["schema"]) == ORDER_V1


def test_an_unknown_id_is_the_confluent_not_found_error(schema_registry: SchemaRegistry) -> None:
    with pytest.raises(urllib.error.HTTPError) as error:
        schema_registry.call("GET", "/schemas/ids/987654")
    assert error.value.code == 404
    assert json.loads(error.value.read())["error_code"] == 40403

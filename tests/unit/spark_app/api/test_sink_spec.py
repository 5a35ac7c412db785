"""spec.job.sink's table sinks as the runner and the operator read them (pydantic; the CRD's
CEL twins of these rules run on a real API server in tests/integration/operator/
test_op_validation.py, from tests/support/bad_input.py)."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from spark_app.api.sink_spec import ICEBERG_NO_PATH, ICEBERG_TABLE, TABLE_ONLY, SinkSpec

pytestmark = pytest.mark.unit


def test_an_iceberg_sink_names_its_table_and_takes_the_table_fields():
    sink = SinkSpec.model_validate(
        {
            "format": "iceberg",
            "table": "lake.events.orders",
            "partitionBy": ["topic"],
            "tableProperties": {"write.target-file-size-bytes": "134217728"},
        }
    )
    assert (sink.table, sink.partition_by, sink.output_mode) == (
        "lake.events.orders",
        ["topic"],
        "append",
    )


@pytest.mark.parametrize(
    ("sink", "message"),
    [
        ({"format": "iceberg"}, ICEBERG_TABLE),
        ({"format": "iceberg", "table": "a.b", "path": "s3a://lake/b"}, ICEBERG_NO_PATH),
        ({"format": "delta", "path": "s3a://lake/b", "table": "a.b"}, TABLE_ONLY),
        ({"format": "iceberg", "table": "a.b", "outputMode": "complete"}, "append only"),
        ({"format": "iceberg", "table": "orders"}, "pattern"),
        ({"format": "iceberg", "table": "a.b", "options": {"k": "v"}}, "iceberg sinks are not"),
    ],
)
def test_an_iceberg_sink_without_its_table_or_with_another_sinks_fields_is_refused(sink, message):
    with pytest.raises(ValidationError, match=re.escape(message)):
        SinkSpec.model_validate(sink)

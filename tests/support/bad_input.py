"""Generated bad input that used to reach a driver launch (issue 26), one strategy per class.

Each strategy draws a whole spec (a valid base spec with one kind of bad input in it) and the
spec field the refusal must name. The unit tests feed them to the pure validation; the API-server
test (tests/integration/operator/test_op_validation.py) applies them with the operator running
and checks that no driver pod is ever created. Pure: no kopf, no client.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from spark_app.api.sink_spec import FILE_SINK_FORMATS, SINK_OUTPUT_MODES
from spark_app.api.source_spec import CLIENT_KEY_FIELDS

Case = tuple[dict[str, Any], str]  # (spec, the field its refusal names)

_TOPIC_CHARS = string.ascii_letters + string.digits + "._-"
_PATH = st.text(alphabet=string.ascii_lowercase + string.digits + "-_", min_size=1, max_size=12)


Base = Callable[[], dict[str, Any]]  # a valid spec, new on every call


# --- topic names Kafka refuses ----------------------------------------------------------------

BAD_TOPICS = st.one_of(
    st.sampled_from([".", ".."]),
    # a character Kafka refuses somewhere in an otherwise fine name
    st.tuples(
        st.text(alphabet=_TOPIC_CHARS, max_size=10),
        st.sampled_from([" ", "/", ":", "*", "#", "é", "+", ",", "@"]),
        st.text(alphabet=_TOPIC_CHARS, max_size=10),
    ).map("".join),
    st.integers(250, 300).map(lambda n: "t" * n),
)


@st.composite
def bad_topics(draw: st.DrawFn, base: Base) -> Case:
    topic = draw(BAD_TOPICS)
    spec = base()
    where = draw(st.sampled_from(["subscribe", "sink", "startingOffsets"]))
    if where == "subscribe":
        spec["job"]["source"]["subscribe"] = [*draw(st.sampled_from([[], ["orders"]])), topic]
        return spec, "spec.job.source.subscribe"
    if where == "sink":
        spec["job"]["sink"] = {"format": "kafka", "topic": topic}
        return spec, "spec.job.sink.topic"
    spec["job"]["source"]["startingOffsets"] = f'{{"{topic}":{{"0":1}}}}'
    return spec, "spec.job.source.startingOffsets"


# --- checkpoint locations without a scheme or at the (local) root -----------------------------


@st.composite
def bad_locations(draw: st.DrawFn, base: Base) -> Case:
    segments = draw(st.lists(_PATH, min_size=1, max_size=3))
    root = draw(st.sampled_from(["/", "//", "/.", "/..", "/./", "/../.."]))
    value = draw(
        st.sampled_from(
            [
                "/" + "/".join(segments),  # no scheme
                "/".join(segments),  # no scheme, relative
                "file://" + root,  # the container's read-only root
            ]
        )
    )
    spec = base()
    if draw(st.booleans()):
        spec["checkpoint"]["location"] = value
        return spec, "spec.checkpoint.location"
    spec["job"]["sink"] = {"format": "parquet", "path": value}
    return spec, "spec.job.sink.path"


# --- an output mode the sink cannot run -------------------------------------------------------


@st.composite
def bad_output_modes(draw: st.DrawFn, base: Base) -> Case:
    pairs = [
        (sink, mode)
        for sink, modes in SINK_OUTPUT_MODES.items()
        for mode in ("append", "update", "complete")
        if mode not in modes
    ]
    sink, mode = draw(st.sampled_from(pairs))
    spec = base()
    if sink in FILE_SINK_FORMATS or sink == "delta":
        spec["job"]["sink"] = {"format": sink, "path": "s3a://lake/out", "outputMode": mode}
    else:
        spec["job"]["sink"] = {"format": sink, "topic": "out", "outputMode": mode}
    return spec, "spec.job.sink.outputMode"


# --- a null in a map of strings (the API server would drop the key) ---------------------------


@st.composite
def null_values(draw: st.DrawFn, base: Base) -> Case:
    name = draw(st.from_regex(r"[a-z][a-z0-9]{0,8}(\.[a-z][a-z0-9]{0,8}){0,2}", fullmatch=True))
    where = draw(st.sampled_from(["sparkConf", "kafka", "options", "nodeSelector"]))
    spec = base()
    if where == "sparkConf":
        spec["sparkConf"] = {"spark.sql.shuffle.partitions": "4", f"spark.{name}": None}
        return spec, "spec.sparkConf"
    if where == "kafka":
        spec["job"]["source"]["kafka"] = {f"x.{name}": None}
        return spec, "spec.job.source.kafka"
    if where == "options":
        spec["job"]["sink"]["options"] = {f"x.{name}": None}
        return spec, "spec.job.sink.options"
    spec["nodeSelector"] = {name: None}
    return spec, "spec.nodeSelector"


# --- volume mounts that name no volume --------------------------------------------------------


@st.composite
def unnamed_mounts(draw: st.DrawFn, base: Base) -> Case:
    names = draw(st.lists(st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True), max_size=2))
    volumes = [{"name": n, "emptyDir": {}} for n in dict.fromkeys(names)]
    mount: dict[str, Any] = {"mountPath": "/data"}
    kind = draw(st.sampled_from(["missing", "null", "other"]))
    if kind == "null":
        mount["name"] = None
    elif kind == "other":
        mount["name"] = draw(
            st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True).filter(lambda n: n not in names)
        )
    spec = base()
    spec["volumes"] = volumes
    spec["volumeMounts"] = [*({"name": n, "mountPath": f"/v/{n}"} for n in names[:1]), mount]
    return spec, "spec.volumeMounts"


# --- options that have a field of their own (Kafka client properties, sink options) ----------


@st.composite
def reserved_keys(draw: st.DrawFn, base: Base) -> Case:
    value = draw(st.text(string.ascii_letters + string.digits + "_:.", min_size=1, max_size=20))
    spec = base()
    if draw(st.booleans()):
        key = draw(st.sampled_from(sorted(CLIENT_KEY_FIELDS)))
        spec["job"]["source"]["kafka"] = {"client.id": "me", key: value}
        return spec, "spec.job.source.kafka"
    key = draw(st.sampled_from(["path", "checkpointLocation", "topic", "kafka.bootstrap.servers"]))
    key = "".join(c.upper() if draw(st.booleans()) else c for c in key)  # any case
    spec["job"]["sink"]["options"] = {"compression": "snappy", key: value}
    return spec, "spec.job.sink.options"


# --- a cross-field contradiction the runner's preflight refuses --------------------------------


@st.composite
def source_contradictions(draw: st.DrawFn, base: Base) -> Case:
    """startingOffsets committed (said, or the default) with no group to read it from."""
    spec = base()
    source = spec["job"]["source"]
    del source["groupId"]
    source["commitOffsetsOnCheckpoints"] = False
    if draw(st.booleans()):
        source["startingOffsets"] = "committed"
    source["offsetResetStrategy"] = draw(st.sampled_from(["earliest", "latest", "error"]))
    return spec, "spec.job.source"


# --- table sinks: a missing or unreachable table or catalog, fields of another sink ----------

TABLE_SINK_MISTAKES = [
    {"format": "delta"},  # no table location
    {"format": "delta", "path": "hdfs://nn/lake/orders"},  # delta-rs reaches no HDFS
    {"format": "iceberg", "path": "s3a://lake/orders"},  # a catalog places the table
    {"format": "iceberg", "table": "lake.orders"},  # no catalog
    {  # a password in the catalog's uri instead of its credentialsSecret
        "format": "iceberg",
        "table": "lake.orders",
        "catalog": {"type": "sql", "uri": "postgresql://u:pw@db/c", "warehouse": "s3a://w/h"},
    },
    {  # a sql catalog without a warehouse
        "format": "iceberg",
        "table": "lake.orders",
        "catalog": {"type": "sql", "uri": "sqlite:////data/c.db"},
    },
    {"format": "parquet", "path": "s3a://lake/out", "table": "lake.orders"},
    {"format": "parquet", "path": "s3a://lake/out", "partitionBy": ["topic"]},
    {"format": "kafka", "topic": "out", "tableProperties": {"delta.appendOnly": "true"}},
    {"format": "delta", "path": "s3a://lake/orders", "options": {"mergeSchema": "true"}},
]


@st.composite
def table_sink_mistakes(draw: st.DrawFn, base: Base) -> Case:
    spec = base()
    spec["job"]["sink"] = dict(draw(st.sampled_from(TABLE_SINK_MISTAKES)))
    return spec, "spec.job.sink"


# --- podTemplate fields of the wrong type or an unknown enum value ----------------------------

# Pod fields the operator (or Spark) sets itself: the real pods never show the template's value
# to the pod API. Each with a value of the right type, to draw a wrong one against.
OVERRIDDEN = {
    "spec.restartPolicy": "Never",
    "spec.terminationGracePeriodSeconds": 30,
    "spec.automountServiceAccountToken": True,
    "spec.serviceAccountName": "x",
    "spec.securityContext.runAsUser": 185,
    "spec.securityContext.runAsNonRoot": True,
    "spec.nodeSelector": {"a": "b"},
    "spec.tolerations": [],
    "spec.volumes": [],
    "metadata.labels": {"a": "b"},
    "metadata.annotations": {"a": "b"},
}
ENUMS = ["spec.restartPolicy", "spec.dnsPolicy", "spec.preemptionPolicy"]
_WRONG = {
    str: st.one_of(st.integers(-5, 5), st.booleans(), st.just(["x"]), st.just({"a": 1})),
    int: st.one_of(st.text(string.ascii_letters, min_size=1, max_size=5), st.just([1])),
    bool: st.one_of(st.sampled_from(["yes", "no", "sometimes"]), st.just([True])),
    dict: st.one_of(st.just(["a"]), st.just("a=b"), st.integers(0, 3)),
    list: st.one_of(st.just({"a": 1}), st.just("x"), st.integers(0, 3)),
}


def _put(root: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        root = root.setdefault(part, {})
    root[last] = value


@st.composite
def malformed_pod_templates(draw: st.DrawFn, base: Base) -> Case:
    template: dict[str, Any] = {}
    if draw(st.booleans()):
        dotted = draw(st.sampled_from(sorted(OVERRIDDEN)))
        _put(template, dotted, draw(_WRONG[type(OVERRIDDEN[dotted])]))
    else:
        dotted = draw(st.sampled_from(ENUMS))
        _put(template, dotted, draw(st.sampled_from(["Sometimes", "Maybe", "never", "ALWAYS"])))
    spec = base()
    spec["podTemplate"] = template
    return spec, "spec.podTemplate"


# --- typed records: the schema registry and the reader schema (spec.job.source.value) --------

_VALUE = "spec.job.source.value"
_REGISTRY_HOSTS = st.from_regex(r"[a-z][a-z0-9-]{0,10}(\.[a-z][a-z0-9-]{0,8}){0,2}", fullmatch=True)
_RECORD = '{"type": "record", "name": "Order", "namespace": "shop", "fields": []}'
_NOT_RECORDS = st.sampled_from(
    ['"string"', "42", "[]", "null", '{"type": "enum", "name": "E", "symbols": ["A"]}']
)
_NOT_JSON = st.text(string.ascii_letters + string.digits + '{}[]:," ', min_size=1).filter(
    lambda text: not _is_json(text)
)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@st.composite
def typed_record_contradictions(draw: st.DrawFn, base: Base) -> Case:
    """Avro values without a registry url, a reader schema that is not a record's JSON or that
    comes with a version, a record strategy without the record's name, a CA for plain http."""
    host = draw(_REGISTRY_HOSTS)
    registry: dict[str, Any] = {"url": f"http://{host}:8081/apis/ccompat/v7"}
    value: dict[str, Any] = {"format": "avro", "schemaRegistry": registry}
    kind = draw(
        st.sampled_from(["no-registry", "no-url", "schema", "schema-version", "strategy", "ca"])
    )
    field = _VALUE
    if kind == "no-registry":
        del value["schemaRegistry"]
    elif kind == "no-url":
        del registry["url"]
        registry["timeoutSeconds"] = draw(st.integers(1, 60))
        field = f"{_VALUE}.schemaRegistry.url"
    elif kind == "schema":
        value["readerSchema"] = draw(st.one_of(_NOT_JSON, _NOT_RECORDS))
        field = f"{_VALUE}.readerSchema"
    elif kind == "schema-version":
        value.update(readerSchema=_RECORD, version=draw(st.integers(1, 100)))
        field = f"{_VALUE}.readerSchema"
    elif kind == "strategy":
        registry["subjectStrategy"] = draw(st.sampled_from(["record", "topic-record"]))
        field = f"{_VALUE}.schemaRegistry"
    else:
        registry["caSecret"] = {"name": draw(_REGISTRY_HOSTS)}
        field = f"{_VALUE}.schemaRegistry.caSecret"
    spec = base()
    spec["job"]["source"]["value"] = value
    return spec, field


def classes(base: Base) -> dict[str, st.SearchStrategy[Case]]:
    """Every class, each drawing its bad input into a spec from `base`."""
    return {
        "topic-names": bad_topics(base),
        "checkpoint-locations": bad_locations(base),
        "output-modes": bad_output_modes(base),
        "null-values": null_values(base),
        "unnamed-mounts": unnamed_mounts(base),
        "reserved-keys": reserved_keys(base),
        "source-contradictions": source_contradictions(base),
        "malformed-pod-templates": malformed_pod_templates(base),
        "typed-record-contradictions": typed_record_contradictions(base),
        "table-sink-mistakes": table_sink_mistakes(base),
    }

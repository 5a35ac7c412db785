"""Fixtures shared by every tier. Services start only when a test asks for them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from devbed.kafka_broker import KafkaBroker
from devbed.kafka_jars import kafka_version
from devbed.kafka_versions import BROKER_VERSIONS, version_id
from devbed.schema_registry import SchemaRegistry

# pytest's `pythonpath` (pyproject.toml) puts the checked-out tree on this process's sys.path;
# the processes tests start (Spark's Python workers, the operator, tools) get it here.
_ROOT = Path(__file__).resolve().parents[1]
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(_ROOT), str(_ROOT / "operator"), os.environ.get("PYTHONPATH")) if p
)
# Every JVM the tests start (brokers, Kafka's tools, local Spark, the registry) is small and
# short-lived: C2's compilations were half of a Spark test's CPU (50 -> 24 CPU s with C1 only
# and the serial collector; a broker's start 3.3 -> 1.9 s), and two cores are all CI has.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ["JDK_JAVA_OPTIONS"] = " ".join(
    p for p in (TEST_JVM_OPTIONS, os.environ.get("JDK_JAVA_OPTIONS")) if p
)


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One real Kafka broker (KRaft) for the session; tests use topics of their own."""
    with KafkaBroker(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaRegistry]:
    """One real Schema Registry (Apicurio, Confluent-compatible API) for the session; tests
    use subjects of their own."""
    with SchemaRegistry(tmp_path_factory.mktemp("registry")) as registry:
        yield registry


@pytest.fixture(scope="module", params=BROKER_VERSIONS, ids=version_id)
def versioned_kafka(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaBroker]:
    """A broker of each supported version in turn (devbed/kafka_versions.py), one at a
    time per module; the default version is the session's `kafka`. Tests narrow the versions
    with `@pytest.mark.parametrize("versioned_kafka", [...], indirect=True)`."""
    if request.param == kafka_version():
        yield request.getfixturevalue("kafka")
        return
    workdir = tmp_path_factory.mktemp(f"kafka-{request.param}")
    with KafkaBroker(workdir, version=request.param) as broker:
        yield broker


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests on every broker version are also `broker_versions` (`make test-versions`)."""
    for item in items:
        if "versioned_kafka" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.broker_versions)

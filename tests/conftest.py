"""Fixtures shared by every tier. Services start only when a test asks for them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.kafka_broker import KafkaBroker


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One real Kafka broker (KRaft) for the session; tests use topics of their own."""
    with KafkaBroker(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker

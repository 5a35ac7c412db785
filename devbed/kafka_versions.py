"""The Apache Kafka broker versions the project supports and tests (docs/source/kafka-versions.md,
"Broker versions"): the oldest supported, the newest of the 3.x line, 4.0 and the default
(the pom's, which the images and every other test use).

3.5.2 is the oldest: Kafka 3.5 is the first release whose KRaft mode creates SCRAM users
(KIP-900, `kafka-storage format --add-scram`), so every security mode the project offers runs
on a KRaft broker of each version; older brokers are untested.

CI reads the cheap checks (every engine's identity, codec and security tests) on every
version, and kills a driver on the oldest and the default version; `make test-versions`
(STREAMJOB_BROKER_MATRIX=full) kills one on every version.
"""

from __future__ import annotations

import os

from devbed.kafka_jars import kafka_version

OLDEST = "3.5.2"
BROKER_VERSIONS = (OLDEST, "3.9.1", "4.0.1", kafka_version())
MATRIX_ENV = "STREAMJOB_BROKER_MATRIX"


def full_matrix() -> bool:
    return os.environ.get(MATRIX_ENV) == "full"


def driver_kill_versions() -> tuple[str, ...]:
    """The versions on which a driver is SIGKILLed and restored: the oldest in every run (the
    default version's own kill test runs in every run too), each one in the full matrix."""
    return BROKER_VERSIONS if full_matrix() else (OLDEST,)


def version_id(version: str) -> str:
    """A test id's part naming the broker version: `kafka-3.5.2`."""
    return f"kafka-{version}"

"""What a test broker is configured with: its server.properties and log4j templates, the
quorum the nodes of one cluster share, and the cluster's TLS material and SCRAM password."""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from pathlib import Path

from devbed.tls import Authority

SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id={node_id}
controller.quorum.voters={voters}
# The quorum's leader resigns when a majority has not fetched from it for 1.5 x this (Kafka's
# default 2 s). Three JVMs on two loaded cores stall longer than that: after one node was
# killed the other two kept trading the leadership, and as each new controller restarts the
# brokers' session clocks, the dead broker was never fenced and its partitions never moved.
controller.quorum.fetch.timeout.ms=10000
listeners=PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_port},\
SSL://127.0.0.1:{ssl_port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_port},\
SSL://127.0.0.1:{ssl_port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL,\
CONTROLLER:PLAINTEXT
# SASL_SSL and SSL beside PLAINTEXT (test tools, producers): SCRAM users are created at format
# time, the certificate is signed by a CA of the test's own (devbed/tls.py). The SSL
# listener is mutual TLS: a client shows a certificate of that CA instead of a password.
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=\
org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location={keystore}
ssl.truststore.type=PEM
ssl.truststore.location={truststore}
listener.name.ssl.ssl.client.auth=required
inter.broker.listener.name=PLAINTEXT
log.dirs={data_dir}
num.partitions=1
offsets.topic.replication.factor={replicas}
offsets.topic.num.partitions=4
transaction.state.log.replication.factor={replicas}
transaction.state.log.min.isr={min_isr}
default.replication.factor={replicas}
min.insync.replicas={min_isr}
# A replica that fell out of the ISR never becomes leader: losing acknowledged records
# is what a test would have to detect, not what the bed does by itself.
unclean.leader.election.enable=false
group.initial.rebalance.delay.ms=0
# Unknown topics must be errors, not silently created topics.
auto.create.topics.enable=false
log.segment.bytes=16777216
"""

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
"""

# Kafka 3.x logs through log4j 1 (reload4j) and ignores a log4j2 file.
LOG4J1 = """\
log4j.rootLogger={level}, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log_file}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
"""
# the file each template is written to in the broker's directory
LOG4J_FILES = (("log4j2.properties", LOG4J2), ("log4j.properties", LOG4J1))


@dataclass(frozen=True)
class Quorum:
    """What the nodes of one cluster share: the controller voters, the cluster id, the TLS
    authority and SCRAM password (in `secrets`), the broker version and replication."""

    voters: str
    cluster_id: str
    secrets: Path
    version: str
    replicas: int = 1

    @property
    def min_isr(self) -> int:
        return 2 if self.replicas >= 3 else 1


def new_cluster_id() -> str:
    cluster_id = "-"
    while cluster_id.startswith("-"):  # the tool would read "-..." as an option (1 in 64)
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    return cluster_id


def make_tls(secrets: Path) -> Path:
    """Once per cluster: a CA, the listeners' certificate (SAN 127.0.0.1, localhost; every
    node serves it), a client certificate for the SSL listener and the SCRAM password.
    Returns the PEM keystore."""
    keystore = secrets / "keystore.pem"
    if not keystore.exists():
        authority = Authority.create(secrets)
        server = authority.issue(["127.0.0.1", "localhost"])
        authority.issue(["streamingjob-client"], stem="client", usage="clientAuth")
        (secrets / "scram-password").write_text(uuid.uuid4().hex)
        keystore.write_text(server.keystore_pem())
    return keystore

#!/bin/bash
# Starts a Kafka node in KRaft mode (broker and controller in one process): a single-node
# cluster by default, one node of several with KAFKA_CONTROLLER_QUORUM_VOTERS.
#
# Configuration by environment:
#   KAFKA_PORT                 client listener port (default 9092), bound on all interfaces
#   KAFKA_ADVERTISED_HOST      host name clients are told to use (default: the pod's IP; in a
#                              cluster set it to the Service name, e.g. kafka.<ns>.svc)
#   KAFKA_ADVERTISED_LISTENERS overrides the advertised listeners entirely
#   KAFKA_CONTROLLER_PORT      controller listener port on loopback (default 9093)
#   KAFKA_NODE_ID              node id (default 1); `ordinal` takes the StatefulSet ordinal of the
#                              pod's host name (kafka-2 -> 2)
#   KAFKA_CONTROLLER_QUORUM_VOTERS  the controller voters of a cluster of several nodes, e.g.
#                              0@kafka-0.kafka-brokers:9093,1@kafka-1.kafka-brokers:9093,...; the
#                              controller listener then binds all interfaces and is advertised
#                              under KAFKA_ADVERTISED_HOST (default: this node alone, on loopback).
#                              Every node of a cluster must be formatted with the same
#                              KAFKA_CLUSTER_ID.
#   KAFKA_CLUSTER_ID           cluster id used when the storage is formatted (default: random)
#   KAFKA_DATA_DIR             log directory (default /var/lib/kafka/data); formatted once, so a
#                              restart with the same volume keeps topics and offsets
#   KAFKA_HEAP                 JVM heap (default 512m)
#   KAFKA_GC_OPTS              the JVM's collector flags (default G1, 20 ms pause goal; a small
#                              test cluster spends less CPU with -XX:+UseSerialGC)
#   KAFKA_LOG_LEVEL            root log level (default INFO)
#   KAFKA_CFG_<NAME>           any broker property: KAFKA_CFG_NUM_PARTITIONS=3 -> num.partitions=3
#   KAFKA_TLS_DIR              directory with tls.crt (chain) and tls.key (PKCS#8, unencrypted),
#                              e.g. a mounted kubernetes.io/tls Secret (default /etc/kafka/tls).
#                              When tls.crt exists, a SASL_SSL listener (SCRAM-SHA-512) is added
#                              beside PLAINTEXT on
#   KAFKA_SASL_SSL_PORT        (default 9094), advertised under KAFKA_ADVERTISED_HOST, with the
#                              SCRAM user KAFKA_SCRAM_USERNAME / KAFKA_SCRAM_PASSWORD created when
#                              the storage is formatted (KRaft, KIP-900). The password is never
#                              printed.
# Kubernetes' service links put variables such as KAFKA_PORT=tcp://10.96.0.10:9092 into every pod
# of a namespace with a Service named "kafka": port variables that are not plain numbers are
# ignored for that reason (pods can also set enableServiceLinks: false).
set -euo pipefail

number_or() { if [[ ${1:-} =~ ^[0-9]+$ ]]; then echo "$1"; else echo "$2"; fi; }
port=$(number_or "${KAFKA_PORT:-}" 9092)
controller_port=$(number_or "${KAFKA_CONTROLLER_PORT:-}" 9093)
node_id=${KAFKA_NODE_ID:-1}
if [ "$node_id" = ordinal ]; then
  [[ $(hostname) =~ -([0-9]+)$ ]] || { echo "KAFKA_NODE_ID=ordinal: host name $(hostname) has no -<n>" >&2; exit 2; }
  node_id=${BASH_REMATCH[1]}
fi
data_dir=${KAFKA_DATA_DIR:-/var/lib/kafka/data}
advertised_host=${KAFKA_ADVERTISED_HOST:-$(hostname -i | awk '{print $1}')}
sasl_port=$(number_or "${KAFKA_SASL_SSL_PORT:-}" 9094)
tls_dir=${KAFKA_TLS_DIR:-/etc/kafka/tls}
secured=false
[ -f "$tls_dir/tls.crt" ] && secured=true
listeners="PLAINTEXT://0.0.0.0:$port"
default_advertised="PLAINTEXT://$advertised_host:$port"
if $secured; then
  listeners="$listeners,SASL_SSL://0.0.0.0:$sasl_port"
  default_advertised="$default_advertised,SASL_SSL://$advertised_host:$sasl_port"
fi
voters=${KAFKA_CONTROLLER_QUORUM_VOTERS:-$node_id@127.0.0.1:$controller_port}
controller_listener="CONTROLLER://127.0.0.1:$controller_port"
if [ -n "${KAFKA_CONTROLLER_QUORUM_VOTERS:-}" ]; then
  controller_listener="CONTROLLER://0.0.0.0:$controller_port"
  default_advertised="$default_advertised,CONTROLLER://$advertised_host:$controller_port"
fi
advertised=${KAFKA_ADVERTISED_LISTENERS:-$default_advertised}
config_dir=${KAFKA_CONFIG_DIR:-/tmp/kafka-config}
mkdir -p "$config_dir" "$data_dir"
props="$config_dir/server.properties"

# Defaults first; later lines (KAFKA_CFG_*) win because Java's Properties keeps the last value.
cat >"$props" <<PROPS
process.roles=broker,controller
node.id=$node_id
controller.quorum.voters=$voters
listeners=$listeners,$controller_listener
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$data_dir
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
PROPS
if $secured; then
  # Kafka's PEM keystore: the key and its chain in one file (no keytool, no password).
  cat "$tls_dir/tls.key" "$tls_dir/tls.crt" >"$config_dir/keystore.pem"
  cat >>"$props" <<PROPS
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=$config_dir/keystore.pem
PROPS
fi
while IFS='=' read -r name value; do
  key=$(tr 'A-Z_' 'a-z.' <<<"${name#KAFKA_CFG_}")
  printf '%s=%s\n' "$key" "$value" >>"$props"
done < <(env | grep -E '^KAFKA_CFG_[A-Z0-9_]+=' | grep -vE '=(tcp|udp|sctp)://' || true)

java=("${JAVA_HOME:+$JAVA_HOME/bin/}java" "-Xms${KAFKA_HEAP:-512m}" "-Xmx${KAFKA_HEAP:-512m}"
  ${KAFKA_GC_OPTS:--XX:+UseG1GC -XX:MaxGCPauseMillis=20} -Djava.awt.headless=true
  "-Dlog4j2.configurationFile=/opt/kafka/log4j2.properties" -cp "/opt/kafka/libs/*")

# quoted ARG...: each argument a line of a Java argument file, quoted
quoted() {
  local a
  for a in "$@"; do
    a=${a//\\/\\\\}
    printf '"%s"\n' "${a//\"/\\\"}"
  done
}

if [ ! -f "$data_dir/meta.properties" ]; then
  # 22 characters of URL-safe base64 = the 16 random bytes of a Kafka Uuid.
  cluster_id=${KAFKA_CLUSTER_ID:-$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')}
  cluster_id=${cluster_id/#-/A}  # a leading "-" would be read as an option (1 in 64)
  echo "formatting $data_dir for cluster $cluster_id"
  # the tool's main class and arguments in a Java argument file (`java @FILE`, this user's
  # only): the SCRAM password on its command line would show in `ps`
  args=$(umask 077 && mktemp)
  quoted kafka.tools.StorageTool format --ignore-formatted -t "$cluster_id" -c "$props" >"$args"
  if $secured && [ -n "${KAFKA_SCRAM_USERNAME:-}" ]; then
    echo "creating the SCRAM-SHA-512 user $KAFKA_SCRAM_USERNAME"
    quoted --add-scram \
      "SCRAM-SHA-512=[name=$KAFKA_SCRAM_USERNAME,password=$KAFKA_SCRAM_PASSWORD]" >>"$args"
  fi
  "${java[@]}" "@$args"
  rm -f "$args"
fi
echo "starting Kafka: listeners $listeners, advertised $advertised"
exec "${java[@]}" kafka.Kafka "$props"

#!/usr/bin/env bash
# Creates every topic modstream reads or writes (idempotent), then lists them. Auto-creation is
# off on the broker: partition counts are decided here, never by whichever client comes first.
# Run by docker-compose.yml's kafka-init and by the kafka-init Job (kafka-init.yaml) alike.
#   KAFKA_BOOTSTRAP       the brokers (required)
#   REPLICATION_FACTOR    1 on a single broker, 3 on a production cluster
#   KAFKA_COMMAND_CONFIG  a client properties file for SASL/TLS clusters (optional)
set -euo pipefail
bootstrap=${KAFKA_BOOTSTRAP:?set KAFKA_BOOTSTRAP}
config=()
if [[ -n ${KAFKA_COMMAND_CONFIG:-} ]]; then config=(--command-config "$KAFKA_COMMAND_CONFIG"); fi
topics() { /opt/kafka/bin/kafka-topics.sh --bootstrap-server "$bootstrap" "${config[@]}" "$@"; }
create() { topics --create --if-not-exists --topic "$1" --partitions "$2" --replication-factor "${REPLICATION_FACTOR:-1}"; }

# posts: the unit of moderation parallelism (at most one worker per partition; KEDA's maximum).
create posts 12
create verdicts 12
create verdicts.shadow 12
create posts.dlq 3
create feedback 3
create feedback.dlq 1
create profiles 3
create profiles.dlq 1
topics --describe

# Sourced by the bench scripts: start_kafka DIR PORT CONTROLLER_PORT [PROPERTIES...]
# starts a one-node Apache Kafka (KRaft combined mode, the jars scripts/peers.sh
# fetched) with its log directory in DIR, waits until it answers, and sets
# KAFKA_PID. Extra PROPERTIES (key=value) are appended to server.properties.
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/peers.sh" >&2
start_kafka() {
  local dir=$1 port=$2 cport=$3; shift 3
  mkdir -p "$dir"
  {
    echo "process.roles=broker,controller"
    echo "node.id=1"
    echo "controller.quorum.voters=1@127.0.0.1:$cport"
    echo "listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport"
    echo "advertised.listeners=PLAINTEXT://127.0.0.1:$port"
    echo "controller.listener.names=CONTROLLER"
    echo "inter.broker.listener.name=PLAINTEXT"
    echo "log.dirs=$dir/data"
    echo "offsets.topic.replication.factor=1"
    echo "transaction.state.log.replication.factor=1"
    echo "transaction.state.log.min.isr=1"
    echo "share.coordinator.state.topic.replication.factor=1"
    echo "group.initial.rebalance.delay.ms=0"
    printf '%s\n' "$@"
  } > "$dir/server.properties"
  local jvm=(-Xms512m -Xmx1g -XX:+UseG1GC -cp "$CAUSEWAY_KAFKA_LIBS/*")
  java "${jvm[@]}" kafka.tools.StorageTool format -t Y2F1c2V3YXktYmVuY2gwMDAw \
    -c "$dir/server.properties" > "$dir/format.log" 2>&1
  java "${jvm[@]}" kafka.Kafka "$dir/server.properties" > "$dir/kafka.log" 2>&1 &
  KAFKA_PID=$!
  for _ in $(seq 1 600); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "kafka never listened on $port; see $dir/kafka.log" >&2
  return 1
}

#!/usr/bin/env bash
# Starts a local Redis Cluster of 3 masters and 3 replicas (one replica per master;
# REDIS_CLUSTER_REPLICAS=2 gives each two) from Debian's redis-server, on 127.0.0.1
# ports BASE.. (BASE=7100 unless REDIS_CLUSTER_BASE_PORT says otherwise). Idempotent: quiet when the cluster is
# already up and serving every slot. Prints nothing on success unless asked:
#   scripts/redis_cluster.sh          start (or check) the cluster
#   scripts/redis_cluster.sh --urls   start it, then print REDIS_URL for it
#   scripts/redis_cluster.sh --stop   stop its nodes and forget their state
# Nodes run without persistence (like the single node of scripts/services.sh);
# their cluster state lives in $REDIS_CLUSTER_DIR (default /tmp/seckill-redis-cluster).
set -euo pipefail

BASE=${REDIS_CLUSTER_BASE_PORT:-7100}
DIR=${REDIS_CLUSTER_DIR:-/tmp/seckill-redis-cluster}
REPLICAS=${REDIS_CLUSTER_REPLICAS:-1}
NODES=$((3 * (1 + REPLICAS)))
PORTS=$(seq "$BASE" $((BASE + NODES - 1)))

say() { printf 'redis-cluster: %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

urls() {
  local out="" p
  for p in $PORTS; do out="${out:+$out,}redis://127.0.0.1:$p"; done
  printf '%s\n' "$out"
}

healthy() {
  local info
  info=$(redis-cli -p "$BASE" cluster info 2>/dev/null) || return 1
  grep -q '^cluster_state:ok' <<<"$info" && grep -q '^cluster_slots_assigned:16384' <<<"$info" \
    && grep -q "^cluster_known_nodes:$NODES" <<<"$info"
}

stop() {
  local p
  for p in $PORTS; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
  rm -rf "$DIR"
}

case "${1:-}" in
  --stop) stop; exit 0 ;;
  --urls | "") ;;
  *) die "unknown argument $1 (use --urls or --stop)" ;;
esac

command -v redis-server >/dev/null 2>&1 || die "redis-server is not installed (scripts/services.sh installs it)"

if ! healthy; then
  say "starting a Redis Cluster of 3 masters and $((3 * REPLICAS)) replicas on ports $BASE-$((BASE + NODES - 1))"
  # A half-made cluster (some nodes down, or nodes that never met) is rebuilt from
  # scratch: there is nothing in it worth keeping, as nothing persists.
  stop
  mkdir -p "$DIR"
  for p in $PORTS; do
    mkdir -p "$DIR/$p"
    redis-server --daemonize yes --bind 127.0.0.1 --port "$p" --dir "$DIR/$p" \
      --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
      --save "" --appendonly no --logfile "$DIR/$p/redis.log" --pidfile "$DIR/$p/redis.pid" \
      || die "redis-server on port $p failed to start (see $DIR/$p/redis.log)"
  done
  for p in $PORTS; do
    for _ in $(seq 1 200); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.05; done
    redis-cli -p "$p" ping >/dev/null 2>&1 \
      || die "redis-server on port $p does not answer; its log ends: $(tail -n 5 "$DIR/$p/redis.log" 2>/dev/null)"
  done
  nodes=()
  for p in $PORTS; do nodes+=("127.0.0.1:$p"); done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas "$REPLICAS" --cluster-yes >"$DIR/create.log" 2>&1 \
    || die "redis-cli --cluster create failed (see $DIR/create.log)"
  for _ in $(seq 1 100); do healthy && break; sleep 0.1; done
  healthy || die "the cluster did not come up serving every slot (see $DIR/*/redis.log)"
  # Replicas must have caught up before anyone relies on WAIT.
  for _ in $(seq 1 100); do
    [ "$(redis-cli -p "$BASE" cluster nodes | grep -c 'slave.*connected')" = $((3 * REPLICAS)) ] && break
    sleep 0.1
  done
fi

if [ "${1:-}" = --urls ]; then urls; fi

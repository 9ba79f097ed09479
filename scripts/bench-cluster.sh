#!/usr/bin/env bash
# One node against the local Redis Cluster, in one run: the same flash crowd
# (`seckill-bench crowd`) against `seckill all` on the single Redis, on the cluster,
# and on the cluster with SECKILL_REDIS_WAIT_REPLICAS=1 (every order waits for its
# replica). Prints requests/s and the accept path's latency of each phase, and the
# ratios to the first. Each phase has a namespace and a database of its own,
# removed afterwards.
#
#   scripts/bench-cluster.sh [SHOPPERS] [STOCK] [CONCURRENCY]
set -euo pipefail
cd "$(dirname "$0")/.."
SHOPPERS=${1:-30000}
STOCK=${2:-30000}
CONC=${3:-64}
scripts/services.sh
CLUSTER=$(scripts/redis_cluster.sh --urls)
cargo build --release --quiet -p seckill --bin seckill
cargo build --release --quiet -p seckill-bench
B=target/release/seckill
work=$(mktemp -d)
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
  for db in $(psql -h 127.0.0.1 -d postgres -tAc "SELECT datname FROM pg_database WHERE datname LIKE 'seckill_bc_%'"); do
    psql -h 127.0.0.1 -d postgres -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT

phase() { # name redis_url cluster wait_replicas
  local name=$1 ns="bc$(date +%s%N | tail -c 9)"
  psql -h 127.0.0.1 -d postgres -qc "CREATE DATABASE seckill_bc_$ns" >/dev/null
  export DATABASE_URL="postgres://root@127.0.0.1:5432/seckill_bc_$ns" SECKILL_NAMESPACE=$ns \
    REDIS_URL=$2 SECKILL_REDIS_CLUSTER=$3 SECKILL_REDIS_WAIT_REPLICAS=$4 \
    SECKILL_HTTP_ADDR=127.0.0.1:0 SECKILL_RATE_LIMIT_PER_IP=0 SECKILL_RATE_LIMIT_PER_USER=0 \
    SECKILL_MAX_IN_FLIGHT=0 SECKILL_JWT_SECRET=bench-cluster-secret-0123456789abcdef RUST_LOG=warn,seckill=info
  $B all >"$work/$name.log" 2>&1 &
  server=$!
  local port=""
  for _ in $(seq 1 300); do
    port=$(grep -o 'addr=127.0.0.1:[0-9]*' "$work/$name.log" | head -1 | cut -d: -f2) && [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { cat "$work/$name.log"; echo "bench-cluster: $name did not start" >&2; exit 1; }
  # Wait until Redis is verified (the first epoch repaired): readiness says so.
  for _ in $(seq 1 300); do
    curl -fsS "http://127.0.0.1:$port/health/ready" | grep -q '"state":"verified"' && break
    sleep 0.1
  done
  echo "== $name"
  target/release/seckill-bench crowd --url "http://127.0.0.1:$port" --stock "$STOCK" --shoppers "$SHOPPERS" \
    --concurrency "$CONC" | tee "$work/$name.out" | grep -E 'requests/s|^accepted|^409|^503|persisted|invariant'
  kill "$server"; wait "$server" 2>/dev/null || true; server=""
  unset DATABASE_URL SECKILL_NAMESPACE REDIS_URL SECKILL_REDIS_CLUSTER SECKILL_REDIS_WAIT_REPLICAS
}

phase node redis://127.0.0.1:6379 false 0
phase cluster "$CLUSTER" true 0
phase cluster-wait1 "$CLUSTER" true 1

echo "== summary (ratios to the single node, this run)"
base=$(grep -o '= [0-9]* requests/s' "$work/node.out" | grep -o '[0-9]*')
for name in node cluster cluster-wait1; do
  rps=$(grep -o '= [0-9]* requests/s' "$work/$name.out" | grep -o '[0-9]*')
  acc=$(grep -E '^accepted' "$work/$name.out" | awk '{print "p50 " $3 " ms, p99 " $5 " ms"}')
  awk -v n="$name" -v r="$rps" -v b="$base" -v a="$acc" 'BEGIN { printf "%-14s %7d requests/s  %.2fx   accepted %s\n", n, r, r / b, a }'
done

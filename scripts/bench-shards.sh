#!/usr/bin/env bash
# How one hot sale spreads over a Redis Cluster's masters: starts `seckill all` on
# the local cluster (scripts/redis_cluster.sh), fires `seckill-bench crowd` at a sale
# with `--stock-shards` S (default 6), and prints each master's share of the script
# calls (INFO commandstats of every master, before and after the crowd).
#
#   scripts/bench-shards.sh [SHARDS] [STOCK] [SHOPPERS] [CONCURRENCY]
#
# BENCH_PROFILE=debug uses debug builds (the shares do not depend on the profile;
# the throughput does). The run uses a database of its own, seckill_bench_shards
# (made with psql if missing), and a namespace of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARDS=${1:-6}
STOCK=${2:-20000}
SHOPPERS=${3:-30000}
CONC=${4:-64}
PROFILE=${BENCH_PROFILE:-release}
flag=$([ "$PROFILE" = release ] && echo --release || true)
CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1} cargo build $flag --quiet -p seckill --bin seckill
CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1} cargo build $flag --quiet -p seckill-bench
B=target/$PROFILE
export REDIS_URL=$(scripts/redis_cluster.sh --urls)
export SECKILL_REDIS_CLUSTER=true
export SECKILL_NAMESPACE=bench-shards-$$
export SECKILL_HTTP_ADDR=127.0.0.1:18089
export SECKILL_RATE_LIMIT_PER_USER=0 SECKILL_RATE_LIMIT_PER_IP=0 SECKILL_MAX_IN_FLIGHT=0
if [ -z "${DATABASE_URL:-}" ]; then
  psql -h 127.0.0.1 -U root -d postgres -Atc "SELECT 1 FROM pg_database WHERE datname = 'seckill_bench_shards'" | grep -q 1 ||
    psql -h 127.0.0.1 -U root -d postgres -qc "CREATE DATABASE seckill_bench_shards"
  export DATABASE_URL=postgres://root@127.0.0.1:5432/seckill_bench_shards
fi
export RUST_LOG=${RUST_LOG:-warn}
$B/seckill all &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  curl -fsS -o /dev/null "http://$SECKILL_HTTP_ADDR/health/ready" && break
  sleep 0.2
done
$B/seckill-bench crowd --url "http://$SECKILL_HTTP_ADDR" --stock "$STOCK" --shoppers "$SHOPPERS" \
  --concurrency "$CONC" --stock-shards "$SHARDS"

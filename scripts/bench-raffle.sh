#!/usr/bin/env bash
# Latency of raffle reads and entries while a large raffle is closed and drawn
# (no request waits on the draw). Starts `seckill all` (release build)
# on a database and namespace of its own, runs `seckill-bench raffle` against it,
# and removes both.
#
#   scripts/bench-raffle.sh [ENTRIES] [READERS]
set -euo pipefail
cd "$(dirname "$0")/.."
ENTRIES=${1:-200000}
READERS=${2:-8}
scripts/services.sh >/dev/null
cargo build --release --quiet -p seckill --bin seckill
cargo build --release --quiet -p seckill-bench
work=$(mktemp -d)
ns="br$(date +%s%N | tail -c 9)"
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
  psql -h 127.0.0.1 -d postgres -qc "DROP DATABASE IF EXISTS seckill_$ns WITH (FORCE)" >/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
psql -h 127.0.0.1 -d postgres -qc "CREATE DATABASE seckill_$ns" >/dev/null
export DATABASE_URL="postgres://root@127.0.0.1:5432/seckill_$ns" SECKILL_NAMESPACE=$ns \
  SECKILL_HTTP_ADDR=127.0.0.1:0 SECKILL_RATE_LIMIT_PER_IP=0 SECKILL_RATE_LIMIT_PER_USER=0 \
  SECKILL_JWT_SECRET=bench-raffle-secret-0123456789abcdef RUST_LOG=warn,seckill=info
target/release/seckill all >"$work/server.log" 2>&1 &
server=$!
port=""
for _ in $(seq 1 300); do
  port=$(grep -o 'addr=127.0.0.1:[0-9]*' "$work/server.log" | head -1 | cut -d: -f2) && [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { cat "$work/server.log"; echo "bench-raffle: the server did not start" >&2; exit 1; }
target/release/seckill-bench raffle --url "http://127.0.0.1:$port" --entries "$ENTRIES" --readers "$READERS"
grep -E 'raffle (entries closed|drawn)' "$work/server.log" | sed 's/^/server: /' || true

#!/usr/bin/env bash
# Measures, in one run with wrk on loopback, the order endpoint (accept path and
# sold-out path) against the same server's /health/live, and prints the ratios.
#
#   scripts/bench-wrk.sh [URL] [SECONDS] [CONNECTIONS]
#
# Needs a running server (scripts/run.sh) with the same SECKILL_JWT_SECRET, and wrk
# (installed from Debian if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
URL=${1:-http://127.0.0.1:8080}
SECS=${2:-10}
CONNS=${3:-64}
THREADS=2
command -v wrk >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; }
cargo build --release --quiet --bin seckill
B=target/release/seckill
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

ADMIN=$($B token --user 1 --role admin 2>/dev/null)
voucher() { # stock -> id
  curl -fsS -X POST "$URL/api/v1/admin/vouchers" -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' \
    -d "{\"shop_id\":\"1\",\"title\":\"wrk\",\"pay_value\":1,\"actual_value\":1,\"stock\":$1,\"begin_at\":\"$(date -u -d '-1 sec' +%FT%TZ)\",\"end_at\":\"$(date -u -d '+1 hour' +%FT%TZ)\"}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}
# Enough distinct shoppers that none orders twice within the run.
N=$((SECS * 40000))
BASE=$(( ($(date +%s) % 100000) * 10000000 + 1 ))
$B token --user "$BASE" --count "$N" 2>/dev/null > "$work/tokens"
ACCEPT=$(voucher 100000000)
SOLD=$(voucher 1)
curl -fsS -o /dev/null -X POST "$URL/api/v1/vouchers/$SOLD/orders" -H "Authorization: Bearer $($B token --user 1 2>/dev/null)"
sleep 0.5

# CPU ticks (utime + stime) of every process with this command name.
ticks() {
  local total=0 pid
  for pid in $(pgrep -x "$1"); do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)))
  done
  echo "$total"
}
PROCS="seckill redis-server beam.smp postgres"
snapshot() { local p; for p in $PROCS; do printf '%s ' "$(ticks "$p")"; done; }
hz=$(getconf CLK_TCK)

run() { # name path method
  local out before after
  before=($(snapshot))
  out=$(TOKENS="$work/tokens" PATH_="$2" METHOD="$3" THREADS=$THREADS wrk -t$THREADS -c"$CONNS" -d"${SECS}s" --latency -s bench/order.lua "$URL")
  after=($(snapshot))
  local rps p99 i cpu="" procs=($PROCS)
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  for i in "${!procs[@]}"; do
    cpu+="${procs[$i]} $(awk -v a="${before[$i]}" -v b="${after[$i]}" -v hz="$hz" -v s="$SECS" 'BEGIN {printf "%.2f", (b - a) / hz / s}'), "
  done
  echo "$1: $rps requests/s, p99 $p99" >&2
  echo "    cores busy: ${cpu%, }" >&2
  grep '^status' <<<"$out" | sed 's/^/    /' >&2 || true
  echo "$rps"
}
echo "wrk -t$THREADS -c$CONNS -d${SECS}s on $URL" >&2
LIVE=$(run "GET /health/live" /health/live GET)
ACC=$(run "POST orders (accept path)" "/api/v1/vouchers/$ACCEPT/orders" POST)
SOLDR=$(run "POST orders (sold-out path)" "/api/v1/vouchers/$SOLD/orders" POST)
python3 - "$LIVE" "$ACC" "$SOLDR" <<'PY'
import sys
live, acc, sold = map(float, sys.argv[1:])
print(f"accept path   = {acc / live:.2f} x /health/live")
print(f"sold-out path = {sold / live:.2f} x /health/live")
PY

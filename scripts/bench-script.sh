#!/usr/bin/env bash
# The order script against one Redis core of its own: orders per second and
# Redis CPU per order (INFO commandstats' usec_per_call / orders per call), one
# hot sale, accepting (stock 10^9) and refusing (stock 0), for calls of 1 and of
# 16 orders (what a shard's gate coalesces, see src/ordering/gates.rs).
#
#   scripts/bench-script.sh [--rev <git revision>] [--requests 200000]
#
# --rev: also run that revision's lua/reserve.lua, for a before/after in one run:
# one order per call for a script of the old shape (user, order id, created_ms,
# voucher id), calls of 1 and 16 for a batch script (three values per order; the
# call's outbox entry, then a user and a mark per order; the same after the
# shard's floor (and its sequence key); the same with the outbox format after
# the entry; or today's: the caller's points of the shard's history and the
# write's name before the entry, lua/history.lua before the script).
set -euo pipefail
cd "$(dirname "$0")/.."
REV="" REQUESTS=200000
while [ $# -gt 0 ]; do
  case "$1" in
    --rev) REV="$2"; shift 2 ;;
    --requests) REQUESTS="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v redis-benchmark >/dev/null || { echo "redis-benchmark is not installed (redis-tools)" >&2; exit 1; }
PORT=$((20000 + RANDOM % 5000))
DIR=$(mktemp -d)
redis-server --port "$PORT" --save "" --appendonly no --daemonize yes --dir "$DIR" --logfile "$DIR/log" >/dev/null
trap 'redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
until redis-cli -p "$PORT" ping >/dev/null 2>&1; do sleep 0.1; done
cli() { redis-cli -p "$PORT" "$@"; }

# run <label> <sha> <orders per call> <stock> <shape: single|triples|marks|floor|format|named>
run() {
  local label=$1 sha=$2 per=$3 stock=$4 shape=$5
  cli flushall >/dev/null
  cli set '{v1}:stock' "$stock" >/dev/null
  # One write of the shard's history already named, the caller's point on it.
  cli set '{v1}:seq' 1 >/dev/null
  cli set '{v1}:hist' abcdefgh >/dev/null
  cli config resetstat >/dev/null
  local args=()
  case "$shape" in
    single) args=(__rand_int__ __rand_int__ 1700000000000 1) ;;
    triples)
      args=(1)
      for _ in $(seq "$per"); do args+=(__rand_int__ __rand_int__ 1700000000000); done ;;
    marks|floor|format|named)
      # Each order's id and user are random (a new shopper each); the entry is
      # as long as the service's (ids of 18 digits), its content unread by Redis.
      local entry=""
      for i in $(seq "$per"); do
        entry+="${entry:+,}392993493313650689,__rand_int__,1700000000000"
        args+=(__rand_int__ "__rand_int__:1700000000000")
      done
      case "$shape" in
        marks) args=(1 "$entry" "${args[@]}") ;;
        floor) args=(1 0 "$entry" "${args[@]}") ;;
        format) args=(1 0 "$entry" 2 "${args[@]}") ;;
        named) args=(1 1 abcdefgh hgfedcba "$entry" 2 "${args[@]}") ;;
      esac ;;
  esac
  local keys=('{v1}:stock' '{v1}:buyers' '{v1}:admitted' '{v1}:outbox')
  case "$shape" in floor|format) keys+=('{v1}:seq') ;; named) keys+=('{v1}:seq' '{v1}:hist') ;; esac
  local calls=$((REQUESTS / per))
  local rps
  rps=$(redis-benchmark -p "$PORT" -n "$calls" -c 50 -P 4 -r 1000000000 -q --csv \
    EVALSHA "$sha" "${#keys[@]}" "${keys[@]}" "${args[@]}" |
    tail -1 | grep -o '","[0-9.]*"' | head -1 | tr -d '",')
  local usec
  usec=$(cli info commandstats | grep '^cmdstat_evalsha:' | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/')
  awk -v l="$label" -v per="$per" -v rps="$rps" -v usec="$usec" 'BEGIN {
    printf "%-34s %3d orders/call  %9.0f orders/s  %6.2f us Redis CPU per order\n", l, per, rps * per, usec / per }'
}

NEW=$(cli script load "$(cat lua/history.lua lua/reserve.lua)")
if [ -n "$REV" ]; then
  OLD_SRC=$(git show "$REV:lua/reserve.lua")
  if git cat-file -e "$REV:lua/history.lua" 2>/dev/null; then
    OLD_SRC="$(git show "$REV:lua/history.lua")
$OLD_SRC"
  fi
  OLD=$(cli script load "$OLD_SRC")
  if grep -q 'the name of this call' <<<"$OLD_SRC"; then
    OLD_SHAPE=named
  elif grep -q 'the outbox format to write' <<<"$OLD_SRC"; then
    OLD_SHAPE=format
  elif grep -q "the caller's floor" <<<"$OLD_SRC"; then
    OLD_SHAPE=floor
  elif grep -q 'two values per order' <<<"$OLD_SRC"; then
    OLD_SHAPE=marks
  elif grep -q 'three values per order' <<<"$OLD_SRC"; then
    OLD_SHAPE=triples
  else
    OLD_SHAPE=single
  fi
  if [ "$OLD_SHAPE" = single ]; then
    run "$REV reserve.lua, accepting" "$OLD" 1 1000000000 single
    run "$REV reserve.lua, refusing" "$OLD" 1 0 single
  else
    for per in 1 16; do
      run "$REV reserve.lua, accepting" "$OLD" "$per" 1000000000 "$OLD_SHAPE"
      run "$REV reserve.lua, refusing" "$OLD" "$per" 0 "$OLD_SHAPE"
    done
  fi
fi
for per in 1 16; do
  run "reserve.lua, accepting" "$NEW" "$per" 1000000000 named
  run "reserve.lua, refusing" "$NEW" "$per" 0 named
done

#!/usr/bin/env bash
# CPU per accepted order of each process (seckill, Redis, RabbitMQ, Postgres, and
# wrk), the drain rate of the worker alone, and a sale of 1,000,000 orders. Each run
# starts its own seckill (release build) on a database and namespace of its own;
# see scripts/bench_cost.py for what is measured and how.
#
#   scripts/bench-cost.sh cost  [--orders 100000] [--connections 64] [--runs 2]
#   scripts/bench-cost.sh drain [--orders 200000]
#   scripts/bench-cost.sh sale  [--orders 1000000]
#   scripts/bench-cost.sh refuse [--orders 100000]
#   scripts/bench-cost.sh floor   (GET /health/live: the API's CPU per request)
#   scripts/bench-cost.sh polls [--orders 20000] [--pending]   (owners polling, against /health/live)
#   scripts/bench-cost.sh waits [--orders 10000]   (long polls held at once: RSS, idle CPU)
#   ... [--env SECKILL_X=Y]   (passed to the seckill processes)
#   ... --bin BEFORE --bin AFTER --runs 4   (the binaries take turns; medians and ratios)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; }
scripts/services.sh >/dev/null
cargo build --release --quiet --bin seckill
# `waits` holds a connection per long poll.
ulimit -n 65536 2>/dev/null || true
exec python3 scripts/bench_cost.py "$@"

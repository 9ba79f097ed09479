#!/usr/bin/env bash
# The test command: local services, formatting, lints, the whole test suite
# against the real PostgreSQL, Redis and RabbitMQ, then schemathesis and k6
# against a running server.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/services.sh
python3 scripts/check_compose.py docker-compose.yml
# No two source files may import each other, directly or through others.
python3 scripts/import_cycles.py
# The k6 scenarios load (`k6 inspect` runs their init code) before the long suite;
# scripts/k6_smoke.sh runs them at the end.
. scripts/lib/tools.sh
for f in k6/flash-crowd.js k6/browse-and-order.js k6/spike.js; do k6 inspect "$f" >/dev/null; done
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
# Tests that start servers of their own (RabbitMQ, PostgreSQL) need root; they are
# #[ignore]d for everyone else and included here when we are root (as CI is).
if [ "$(id -u)" = 0 ]; then
  ignored=(--include-ignored)
else
  echo "test.sh: not root; the tests that need root are ignored (cargo lists them)" >&2
  ignored=()
fi
cargo test --workspace --all-targets -- "${ignored[@]}"
# The integration tests again on a local Redis Cluster of 3 masters and 3 replicas
# (SECKILL_REDIS_CLUSTER=true); tests that run Redis servers of their own keep
# those (one node each).
TEST_REDIS_CLUSTER=$(scripts/redis_cluster.sh --urls) cargo test --test api -- "${ignored[@]}"
# The server from outside, each run against a server of its own: schemathesis
# holds it to its OpenAPI document (about 2 min), and a short run of each k6
# scenario holds it to the scenarios' thresholds (about 45 s). They take the
# binary the tests just built: after a change, a `cargo build` here would compile
# the crate once more, without the dev-dependencies' features (about a minute).
scripts/schemathesis.sh target/debug/seckill
scripts/k6_smoke.sh target/debug/seckill

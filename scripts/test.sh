#!/usr/bin/env bash
# The test command: local services, formatting, lints, and the whole test suite
# against the real PostgreSQL, Redis and RabbitMQ.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/services.sh
python3 scripts/check_compose.py docker-compose.yml
# No two source files may import each other, directly or through others.
python3 scripts/import_cycles.py
if command -v node >/dev/null 2>&1; then
  for f in k6/*.js; do node --check "$f"; done
else
  echo "test.sh: node not found; skipping the k6 syntax check" >&2
fi
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

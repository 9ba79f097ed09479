#!/usr/bin/env bash
# The test command: local services, formatting, lints, and the whole test suite
# against the real PostgreSQL, Redis and RabbitMQ.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/services.sh
python3 scripts/check_compose.py docker-compose.yml
if command -v node >/dev/null 2>&1; then
  for f in k6/*.js; do node --check "$f"; done
else
  echo "test.sh: node not found; skipping the k6 syntax check" >&2
fi
cargo fmt --check
cargo clippy --all-targets -- -D warnings
cargo test --all-targets

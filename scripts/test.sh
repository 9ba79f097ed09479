#!/usr/bin/env bash
# The test command: local services, formatting, lints, and the whole test suite
# against the real PostgreSQL, Redis and RabbitMQ.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/services.sh
python3 scripts/check_compose.py docker-compose.yml
cargo fmt --check
cargo clippy --all-targets -- -D warnings
cargo test --all-targets

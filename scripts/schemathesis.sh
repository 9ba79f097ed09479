#!/usr/bin/env bash
# Fuzzes the running server from its own OpenAPI document with schemathesis (PyPI)
# and fails on any server error. Start the server first, without rate limits:
#   SECKILL_RATE_LIMIT_PER_IP=0 SECKILL_RATE_LIMIT_PER_USER=0 scripts/run.sh
#   scripts/schemathesis.sh [URL]
set -euo pipefail
cd "$(dirname "$0")/.."
URL=${1:-http://127.0.0.1:8080}
command -v st >/dev/null || python3 -m pip install -q schemathesis
cargo build --release --quiet --bin seckill
ADMIN=$(target/release/seckill token --user 1 --role admin 2>/dev/null)
exec st run "$URL/api-docs/openapi.json" --checks not_a_server_error -H "Authorization: Bearer $ADMIN" --max-examples "${MAX_EXAMPLES:-40}"

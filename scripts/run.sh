#!/usr/bin/env bash
# Runs `seckill all` (API, relay and worker), built in release mode, on the local
# services. Environment variables of the README override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/services.sh
exec cargo run --release --bin seckill -- all

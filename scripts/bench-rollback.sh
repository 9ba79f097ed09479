#!/usr/bin/env bash
# A rollback hidden by another process's write, HIDDEN_TRIES times (50): two
# `serve` processes and a worker on a Redis of their own; each try a SAVE, an
# order through A that a relay reads, DEBUG RELOAD NOSAVE, an order through B,
# A's shopper again. Prints how many were caught (never a second 202, nothing
# failed, the sale repaired); fails at the first that is not. A release build of
# the test binary (several minutes the first time). Not part of the test command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/services.sh
exec cargo test --release --test api nemesis::hidden_rollbacks -- --ignored --nocapture --test-threads 1

#!/usr/bin/env bash
# The nemesis benchmark: two `serve` and two `worker` processes on a
# Redis of their own (AOF, fsync always), a fault every NEMESIS_EVERY_MS (4,000)
# for NEMESIS_SECS (180) per seed (NEMESIS_SEEDS, default 1,2,3,4,5): kill -9 of
# a serve or a worker, a worker or both frozen for NEMESIS_FREEZE_MS (6,000),
# Redis restarted with its data, RabbitMQ connections closed, a freeze overlapping
# a restart, Redis back to a snapshot of a second before (DEBUG RELOAD NOSAVE);
# shoppers retry 503s. Prints per seed how many half-seconds the sale answered
# nothing but 503, and the acknowledged orders no relay had recorded when a
# reload landed (and how many of them were lost), and fails past
# NEMESIS_MAX_CLOSED_PCT (2) or on any other lost, failed or doubled order. A release build of the test binary (several
# minutes the first time). Not part of the test command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/services.sh
exec cargo test --release --test api nemesis::nemesis -- --ignored --nocapture --test-threads 1

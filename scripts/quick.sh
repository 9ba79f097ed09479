#!/usr/bin/env bash
# The quick loop beside scripts/test.sh: the house's checks, formatting, the unit
# tests, and integration tests against the local services.
#   scripts/quick.sh              the integration tests that inject no fault and
#                                 start no server of their own (a few minutes)
#   scripts/quick.sh FILTER...    the integration tests those filters name (cargo's
#                                 substring match), e.g. `scripts/quick.sh orders:: shards::`
# Lints (clippy), the root-only and cluster tests, schemathesis and k6 are left to
# scripts/test.sh, which CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/services.sh
for check in import_cycles sql_owners sizes; do
  python3 "scripts/$check.py"
done
cargo fmt --all --check
started=$SECONDS
cargo test --workspace --lib --bins
if [ $# -gt 0 ]; then
  cargo test --workspace --test api -- "$@"
else
  # The modules that kill, freeze, cut or roll back a dependency, run servers of
  # their own or a browser, the measurements, and admission (its queues and draws
  # wait on their clocks: four minutes of test time).
  faults=(admission:: faults:: nemesis:: cost:: rollback:: went_back:: frozen:: failback:: replication::
    mixed_faults:: cut_off:: pressure:: transient:: alerts:: memory_alarm:: readiness::
    repair:: isolation:: console:: deploy:: dead_letters:: pipeline:: floods:: shards::lost_)
  skips=()
  for m in "${faults[@]}"; do skips+=(--skip "$m"); done
  cargo test --workspace --test api -- "${skips[@]}" --skip on_a_cluster_
fi
echo "quick.sh: the tests took $((SECONDS - started)) s" >&2

#!/usr/bin/env bash
# The test command: local services, formatting, lints, the whole test suite
# against the real PostgreSQL, Redis and RabbitMQ, then schemathesis and k6
# against a running server.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each pass's duration, printed as it ends and again, with the total, at the end.
passes=()
pass() {
  passes+=("$1: $((SECONDS - started)) s")
  echo "test.sh: $1 took $((SECONDS - started)) s" >&2
  started=$SECONDS
}
started=$SECONDS
# The passes so far, printed on the way out whether the run is green or not.
summary() {
  for p in "${passes[@]}"; do echo "  $p" >&2; done
  echo "  total: $SECONDS s" >&2
}
trap summary EXIT
scripts/services.sh
python3 scripts/check_compose.py docker-compose.yml
# The house's rules: no two source files import each other, directly or through
# others, and every import points the way the layout in src/lib.rs says; each
# table's SQL only in its owner's files; no file over 300 lines, no function over
# 80, no `too_many_arguments` allowance. Each check proves itself first.
for check in import_cycles sql_owners sizes; do
  python3 "scripts/$check.py" --self-test
  python3 "scripts/$check.py"
done
# The k6 scenarios load (`k6 inspect` runs their init code) before the long suite;
# scripts/k6_smoke.sh runs them at the end.
. scripts/lib/tools.sh
for f in k6/flash-crowd.js k6/browse-and-order.js k6/spike.js k6/queue.js; do k6 inspect "$f" >/dev/null; done
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
# Tests that start servers of their own (RabbitMQ, PostgreSQL) need root; they are
# #[ignore]d for everyone else and included here when we are root. CI runs them:
# there, not being root fails rather than skipping them.
if [ "$(id -u)" = 0 ]; then
  ignored=(--include-ignored)
elif [ "${CI:-}" = true ]; then
  echo "test.sh: CI=true but not root: the tests that need root would not run" >&2
  exit 1
else
  echo "test.sh: not root; the tests that need root are ignored (cargo lists them)" >&2
  ignored=()
fi
# Tests that need a Redis Cluster (named on_a_cluster_…, #[ignore]d too, and failing
# where TEST_REDIS_CLUSTER names no cluster) run only in the cluster pass below.
# `cost::` is a measurement (Redis commands per second from INFO commandstats, on a
# quiet single node), not a check: it is run by hand, never here; `nemesis::` is
# the fault benchmark of scripts/bench-nemesis.sh (minutes per seed), never here.
# Two tests at a time, one per core (TEST_THREADS to change it): the suite is
# mostly CPU-bound: at three and at four threads, runs of the first pass took
# 526 and 424 s against 558 s at two (noise as large as the gain), and a crowd's
# requests waited past actix's 5 s request-head timeout (408), a cluster
# failover past its 30 s.
threads=(--test-threads "${TEST_THREADS:-2}")
pass "services, the house's checks, fmt and clippy"
cargo test --workspace --all-targets -- "${ignored[@]}" "${threads[@]}" --skip on_a_cluster_ --skip cost:: --skip nemesis::
pass "the first pass"
# The integration tests again on a local Redis Cluster of 3 masters and 3 replicas
# (SECKILL_REDIS_CLUSTER=true); tests that run Redis servers of their own keep
# those (one node each). The URLs in a statement of their own: `set -e` stops here
# if the cluster does not start (in a `VAR=$(…) cargo …` prefix it would not), and
# an empty list stops it too, rather than repeating the single-node pass.
cluster_urls=$(scripts/redis_cluster.sh --urls)
if [ -z "$cluster_urls" ]; then
  echo "test.sh: scripts/redis_cluster.sh printed no URLs: no cluster pass without a cluster" >&2
  exit 1
fi
# `--workspace` as in the first pass: without it Cargo resolves the dependencies'
# features for the root package alone (the bench crate adds some), builds sqlx and
# the crate a second time, and doubles `target/` (a CI run once ran out of disk here).
# The clustered engines' and the partitions' faults run their own
# RabbitMQ nodes, Postgres pair and Redis (a cluster of their own, or one node in
# a network namespace's reach): they ran in the first pass and would only repeat.
# So do the modules whose every test starts a Redis of its own (one node, or a
# cluster of its own) and reads nothing of TEST_REDIS_CLUSTER: they would run
# unchanged.
own_redis=(rollback:: went_back:: alerts:: memory_alarm:: mixed_faults:: readiness:: cut_off::
  frozen:: replication::failover:: replication::masters:: shards::lost_ pressure:: failback:: transient::)
# And the modules that use no Redis of their own making, or only through the order
# path the other modules run on the cluster: admission (Postgres, and single-shard
# orders), the HTTP edge (documents, limits, floods, browsing, the console, the
# image's role), the clocks and Postgres's indexes, dead letters (RabbitMQ).
no_cluster=(admission:: docs:: limits:: floods:: browse:: console:: deploy:: clock::
  order_indexes:: dead_letters::)
skip_own=()
for m in "${own_redis[@]}" "${no_cluster[@]}"; do skip_own+=(--skip "$m"); done
TEST_REDIS_CLUSTER=$cluster_urls cargo test --workspace --test api -- "${ignored[@]}" "${threads[@]}" --skip cost:: --skip nemesis:: \
  --skip faults::rabbit_cluster:: --skip faults::postgres_failover:: --skip faults::partitions:: \
  --skip faults::redis_minority:: "${skip_own[@]}"
if [ "${#ignored[@]}" = 0 ]; then
  TEST_REDIS_CLUSTER=$cluster_urls cargo test --workspace --test api on_a_cluster_ -- --ignored "${threads[@]}"
fi
pass "the cluster pass"
# The server from outside, each run against a server of its own: schemathesis
# holds it to its OpenAPI document (90 s of cases here, ST_MAX_TIME to change it;
# its fuzzing and stateful phases repeat until the budget is spent), and a short run of each k6
# scenario holds it to the scenarios' thresholds (about 65 s). They take the
# binary the tests just built: after a change, a `cargo build` here would compile
# the crate once more, without the dev-dependencies' features (about a minute).
ST_MAX_TIME=${ST_MAX_TIME:-90} scripts/schemathesis.sh target/debug/seckill
pass "schemathesis"
scripts/k6_smoke.sh target/debug/seckill
pass "the k6 scenarios"
echo "test.sh: green" >&2

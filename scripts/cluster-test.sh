#!/usr/bin/env bash
# The clustered engines' faults and the network partitions, each under a
# crowd on a sharded sale with two `serve` and two `worker` processes, against
# servers and namespaces the tests make for themselves (no other deployment is
# touched; run as root: the nodes run as the rabbitmq and postgres users, and the
# partitions need `ip netns`):
#   1. the RabbitMQ node leading the orders queue killed -9 (three nodes), and,
#      separately, cut off from its peers and every client while it lives on;
#   2. the Postgres primary killed -9, its synchronous standby promoted;
#   3. a serve cut off from Postgres, then from Redis, then healed;
#   4. a worker cut off from Postgres mid-batch, then healed;
#   5. a relay cut off from RabbitMQ longer than its confirm timeout, then healed;
#   6. a Redis Cluster master cut off from its replicas and the other masters (the
#      minority side; the service still reaches it) with WAIT 1, then healed.
# (They run in the test command too, scripts/test.sh, as root.) Each prints what it
# measured (answers, closure, promotion time) with its counts.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "cluster-test.sh: run as root" >&2; exit 1; }
scripts/services.sh
exec cargo test --test api -- --include-ignored --nocapture --test-threads 2 \
  faults::rabbit_cluster:: faults::postgres_failover:: faults::partitions:: faults::redis_minority::

#!/usr/bin/env bash
# A clustered deployment of the three engines on this one machine, from Debian's
# packages, beside the machine's own servers (other ports, other node names):
#   - RabbitMQ: three nodes (seckill-c1..3@localhost, AMQP ports BASE+1..3 with
#     BASE=5700), clustered; the orders quorum queue gets a member on each, and a
#     policy mirrors the namespace's classic queues (docs/DEPLOYMENT.md, "Clustered RabbitMQ
#     and Postgres");
#   - Postgres: a primary (port 5441) and a synchronous standby streaming from it
#     (port 5442, made by pg_basebackup), as Debian clusters (pg_createcluster,
#     `seckill-primary` and `seckill-standby`), user root, database seckill;
#   - Redis: a Redis Cluster of 3 masters with two replicas each
#     (scripts/redis_cluster.sh, ports 7200..7208).
#
#   scripts/cluster-up.sh          start (or check) it all, then print the settings
#   scripts/cluster-up.sh down     stop it all and forget its state
#
# The settings it prints (eval them) point `seckill` at the cluster:
#   eval "$(scripts/cluster-up.sh)"; target/release/seckill all
# Promote the standby when the primary dies: pg_ctlcluster <version> seckill-standby promote
set -euo pipefail
cd "$(dirname "$0")/.."

NAMESPACE=${SECKILL_NAMESPACE:-seckill}
DIR=${SECKILL_CLUSTER_DIR:-/tmp/seckill-cluster}
RABBIT_BASE=${SECKILL_CLUSTER_RABBIT_BASE:-5700}
PG_PRIMARY=${SECKILL_CLUSTER_PG_PORT:-5441}
PG_STANDBY=$((PG_PRIMARY + 1))
REDIS_BASE=${SECKILL_CLUSTER_REDIS_BASE:-7200}

say() { printf 'cluster-up: %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

pg_version() { ls /usr/lib/postgresql | sort -n | tail -1; }
redis_cluster() {
  REDIS_CLUSTER_REPLICAS=2 REDIS_CLUSTER_BASE_PORT=$REDIS_BASE REDIS_CLUSTER_DIR=$DIR/redis \
    scripts/redis_cluster.sh "$@"
}

# --- RabbitMQ --------------------------------------------------------------------
rabbit_node() { printf 'seckill-c%s@localhost' "$1"; }
rabbit_env() {
  local n=$1 d=$DIR/rabbit-$1
  printf '%s\n' RABBITMQ_NODENAME="$(rabbit_node "$n")" \
    RABBITMQ_DIST_PORT=$((RABBIT_BASE + 10 + n)) \
    RABBITMQ_CONFIG_FILE="$d/rabbitmq.conf" RABBITMQ_CONF_ENV_FILE="$d/rabbitmq-env.conf" \
    RABBITMQ_MNESIA_BASE="$d/mnesia" RABBITMQ_LOG_BASE="$d/log" RABBITMQ_PID_FILE="$d/pid" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins" ERL_EPMD_ADDRESS=127.0.0.1
}
rabbit_ctl() { local n=$1; shift; rabbitmqctl -q -n "$(rabbit_node "$n")" "$@"; }
rabbit_running() { rabbit_ctl 1 eval 'length(rabbit_nodes:all_running()).' 2>/dev/null | grep -qx 3; }

rabbit_up() {
  rabbit_running && return 0
  # Never wipe a deployment that holds data: a node down is the operator's to
  # bring back (or `down`, which forgets everything).
  [ -d "$DIR/rabbit-1" ] && die "the RabbitMQ nodes exist but are not all running: start the stopped one, or run '$0 down' to forget them"
  say "starting RabbitMQ nodes $(rabbit_node 1), $(rabbit_node 2), $(rabbit_node 3) on ports $((RABBIT_BASE + 1))-$((RABBIT_BASE + 3))"
  rabbit_down
  local n d
  for n in 1 2 3; do
    d=$DIR/rabbit-$n
    mkdir -p "$d/log" "$d/mnesia"
    echo '[].' >"$d/enabled_plugins"
    # pause_minority: a node that sees less than a majority stops serving (as
    # deploy/rabbitmq/cluster.conf and the partition test run them).
    printf 'listeners.tcp.local = 127.0.0.1:%s\ncluster_partition_handling = pause_minority\n' \
      "$((RABBIT_BASE + n))" >"$d/rabbitmq.conf"
    : >"$d/rabbitmq-env.conf"
    chown -R rabbitmq:rabbitmq "$d"
    env $(rabbit_env "$n") rabbitmq-server -detached >/dev/null 2>&1 || die "RabbitMQ node $n did not start (see $d/log)"
  done
  for n in 1 2 3; do
    for _ in $(seq 120); do rabbit_ctl "$n" await_startup >/dev/null 2>&1 && break; sleep 0.5; done
    rabbit_ctl "$n" await_startup >/dev/null 2>&1 || die "RabbitMQ node $n did not start (see $DIR/rabbit-$n/log)"
  done
  for n in 2 3; do
    rabbit_ctl "$n" stop_app && rabbit_ctl "$n" join_cluster "$(rabbit_node 1)" && rabbit_ctl "$n" start_app \
      || die "RabbitMQ node $n did not join $(rabbit_node 1)"
  done
  for _ in $(seq 60); do rabbit_running && break; sleep 0.5; done
  rabbit_running || die "the three RabbitMQ nodes did not form a cluster"
  local ns_re=${NAMESPACE//./\\.}
  rabbit_ctl 1 set_policy --apply-to queues seckill-classic-mirrored "^${ns_re}\\.orders\\.(dead|delay|timeout)\$" \
    '{"ha-mode":"all","ha-sync-mode":"automatic"}' >/dev/null
}

rabbit_down() {
  local n
  for n in 1 2 3; do rabbit_ctl "$n" stop >/dev/null 2>&1 || true; done
  rm -rf "$DIR"/rabbit-*
}

# --- Postgres --------------------------------------------------------------------
pg_sql() { psql -h 127.0.0.1 -p "$1" -U root -d postgres -tAqc "$2"; }
pg_synced() { [ "$(pg_sql "$PG_PRIMARY" "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'" 2>/dev/null)" = 1 ]; }

pg_up() {
  pg_synced && return 0
  local v
  v=$(pg_version)
  [ -d "/etc/postgresql/$v/seckill-primary" ] \
    && die "the Postgres clusters exist but the standby is not synchronous (down, or promoted): see pg_lsclusters, or run '$0 down' to forget them"
  say "starting Postgres $v: primary seckill-primary on $PG_PRIMARY, synchronous standby seckill-standby on $PG_STANDBY"
  pg_down
  pg_createcluster -q -p "$PG_PRIMARY" "$v" seckill-primary -- -A trust >/dev/null
  cat >>"/etc/postgresql/$v/seckill-primary/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
synchronous_commit = on
EOF
  pg_ctlcluster "$v" seckill-primary start
  runuser -u postgres -- psql -h 127.0.0.1 -p "$PG_PRIMARY" -d postgres -qc "CREATE ROLE root SUPERUSER LOGIN"
  pg_sql "$PG_PRIMARY" "CREATE DATABASE seckill" >/dev/null
  pg_createcluster -q -p "$PG_STANDBY" "$v" seckill-standby -- -A trust >/dev/null
  echo "listen_addresses = '127.0.0.1'" >>"/etc/postgresql/$v/seckill-standby/postgresql.conf"
  local data=/var/lib/postgresql/$v/seckill-standby
  find "$data" -mindepth 1 -delete
  runuser -u postgres -- pg_basebackup -h 127.0.0.1 -p "$PG_PRIMARY" -U root -D "$data" -R -X stream
  pg_ctlcluster "$v" seckill-standby start
  # Set once the standby streams: until then every commit would wait for it.
  pg_sql "$PG_PRIMARY" "ALTER SYSTEM SET synchronous_standby_names = '*'" >/dev/null
  pg_sql "$PG_PRIMARY" "SELECT pg_reload_conf()" >/dev/null
  for _ in $(seq 60); do pg_synced && break; sleep 0.5; done
  pg_synced || die "the standby did not become synchronous"
}

pg_down() {
  local v c
  v=$(pg_version)
  for c in seckill-standby seckill-primary; do
    [ -d "/etc/postgresql/$v/$c" ] && pg_dropcluster --stop "$v" "$c" >/dev/null 2>&1 || true
  done
}

# ---------------------------------------------------------------------------------
case "${1:-up}" in
  up) ;;
  down)
    rabbit_down
    pg_down
    redis_cluster --stop
    rm -rf "$DIR"
    say "stopped"
    exit 0
    ;;
  *) die "unknown argument $1 (use up or down)" ;;
esac

[ "$(id -u)" = 0 ] || die "run as root: the nodes run as the rabbitmq and postgres users"
command -v rabbitmq-server >/dev/null && command -v pg_createcluster >/dev/null \
  || die "RabbitMQ and Postgres are not installed (scripts/services.sh installs them)"
mkdir -p "$DIR"
rabbit_up
pg_up
redis_urls=$(redis_cluster --urls)
amqp=""
for n in 1 2 3; do amqp="${amqp:+$amqp,}amqp://guest:guest@127.0.0.1:$((RABBIT_BASE + n))/%2f"; done
cat <<EOF
export AMQP_URL='$amqp'
export DATABASE_URL='postgres://root@127.0.0.1:$PG_PRIMARY/seckill'
export SECKILL_DATABASE_STANDBY_URLS='postgres://root@127.0.0.1:$PG_STANDBY/seckill'
export REDIS_URL='$redis_urls'
export SECKILL_REDIS_CLUSTER=true
export SECKILL_REDIS_WAIT_REPLICAS=1
export SECKILL_NAMESPACE='$NAMESPACE'
EOF

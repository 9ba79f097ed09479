#!/usr/bin/env python3
"""What scripts/bench_cost.py runs: a deployment of seckill on a database and
namespace of its own, wrk's crowd, and the wait until every order is stored."""
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

import bench_env
from bench_env import *  # noqa: F401,F403


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
        subprocess.run([bench_env.BIN, "migrate"], env=self.env, check=True, capture_output=True)
        self.log = open(f"/tmp/bench-cost-{self.ns}.log", "w")

    def start(self, mode):
        p = subprocess.Popen([bench_env.BIN, mode], env=self.env, stdout=self.log, stderr=self.log)
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
        args = [bench_env.BIN, "token", "--user", str(user), "--count", str(count)]
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

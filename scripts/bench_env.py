#!/usr/bin/env python3
"""What scripts/bench_cost.py measures with: the binary and the servers it runs
against, CPU read from /proc, and small clients of Redis, Postgres and the API."""
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

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
  polls  owners polling: ORDERS orders placed (stored by the worker, or, with
         --pending, left pending: `seckill serve` alone), then wrk for 5 s on
         each of GET /api/v1/orders/{id} and GET .../orders/mine, every owner in
         turn with their own token (bench/polls.lua), and on GET /health/live:
         polls per second (and as a share of /health/live's) and CPU per poll of
         each process.
  waits  ORDERS long polls held at once: ORDERS pending orders (`seckill serve`
         alone), each owner's `GET /api/v1/orders/{id}?wait=30` held on a
         connection of its own (wrk -c ORDERS); the API process's RSS before and
         while they are held, its CPU over 10 s while nothing changes, then
         `seckill worker` started: how long until every held poll answered.

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
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.error

import bench_env
from bench_env import *  # noqa: F401,F403
from bench_deploy import *  # noqa: F401,F403

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


def poll_wrk(dep, pairs, conns, secs=5):
    """wrk on the lines of `pairs` ("token\tpath") for `secs`: requests, statuses, p99."""
    env = dict(os.environ, PAIRS=pairs, THREADS="2")
    out = subprocess.run(["wrk", "-t2", f"-c{conns}", f"-d{secs}s", "--latency", "-s",
                          os.path.join(ROOT, "bench/polls.lua"), dep.url], env=env, capture_output=True,
                         text=True, check=True).stdout
    statuses = {int(a): int(b) for a, b in re.findall(r"status (\d+): (\d+)", out)}
    p99 = float(re.search(r"p99_ms (\S+)", out).group(1))
    return sum(statuses.values()), statuses, p99


def run_polls(args, env):
    """Owners polling their orders, stored (or pending, --pending), against the floor."""
    dep = Deployment("p", env)
    try:
        dep.start("serve" if args.pending else "all")
        dep.wait_ready()
        voucher = dep.voucher(args.orders * 10)
        base = user_base()
        tokens = f"/tmp/bench-cost-{dep.ns}.tokens"
        mint(dep, base, args.orders, tokens)
        wrk(dep, voucher, tokens, args.connections)
        accepted = dep.accepted()
        if args.pending:
            marks = redis_cli("HGETALL", f"{dep.ns}:{{v{voucher}}}:buyers").split()
            ids = {int(u): int(m.split(":")[0]) for u, m in zip(marks[::2], marks[1::2])}
        else:
            wait_persisted(dep, voucher, accepted)
            rows = psql(dep.db, f"SELECT user_id, id FROM voucher_orders WHERE voucher_id = {voucher}").split()
            ids = dict(tuple(map(int, r.split("|"))) for r in rows)
        toks = open(tokens).read().split()
        by_id, mine = f"{tokens}.id", f"{tokens}.mine"
        with open(by_id, "w") as a, open(mine, "w") as b:
            for user, order in ids.items():
                token = toks[user - base]
                a.write(f"{token}\t/api/v1/orders/{order}\n")
                b.write(f"{token}\t/api/v1/vouchers/{voucher}/orders/mine\n")
        kind = "pending" if args.pending else "stored"
        print(f"\n## polls: {len(ids)} {kind} orders, wrk -t2 -c{args.connections} -d5s each")
        figures = {}
        time.sleep(1)
        cpu = Cpu([dep.procs["serve" if args.pending else "all"].pid])
        for name, path in (("floor", None), ("by id", by_id), ("mine", mine)):
            before = cpu.snapshot()
            if path is None:
                out = subprocess.run(["wrk", "-t2", f"-c{args.connections}", "-d5s", "--latency", dep.url + "/health/live"],
                                     capture_output=True, text=True, check=True).stdout
                n, statuses, p99 = int(re.search(r"(\d+) requests in", out).group(1)), {}, 0.0
            else:
                n, statuses, p99 = poll_wrk(dep, path, args.connections)
            used = {k: v - before[k] for k, v in cpu.snapshot().items()}
            print(f"\n{name}: {n / 5:.0f}/s; statuses {statuses}; p99 {p99:.2f} ms")
            f = report_cpu("", used, n, per="answered request")
            figures[f"{name} per s"] = n / 5
            figures[f"{name} server µs"] = f["server total µs"]
            figures[f"{name} postgres µs"] = f["postgres µs"]
        for name in ("by id", "mine"):
            figures[f"{name} / floor"] = figures[f"{name} per s"] / figures["floor per s"]
            print(f"{name}: {figures[f'{name} / floor']:.2f} × /health/live")
        for f in (tokens, by_id, mine):
            os.unlink(f)
        return figures
    finally:
        dep.stop()


def vm_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def run_waits(args, env):
    """ORDERS long polls held at once on pending orders, then their orders stored."""
    dep = Deployment("w", env)
    try:
        api = dep.start("serve")
        dep.wait_ready()
        voucher = dep.voucher(args.orders * 10)
        base = user_base()
        tokens = f"/tmp/bench-cost-{dep.ns}.tokens"
        mint(dep, base, args.orders, tokens)
        wrk(dep, voucher, tokens, args.connections)
        marks = redis_cli("HGETALL", f"{dep.ns}:{{v{voucher}}}:buyers").split()
        ids = {int(u): int(m.split(":")[0]) for u, m in zip(marks[::2], marks[1::2])}
        toks = open(tokens).read().split()
        pairs = f"{tokens}.waits"
        with open(pairs, "w") as f:
            for user, order in ids.items():
                f.write(f"{toks[user - base]}\t/api/v1/orders/{order}?wait=30\n")
        time.sleep(1)
        rss_before = vm_rss_mb(api.pid)
        env_w = dict(os.environ, PAIRS=pairs, THREADS="2")
        held = subprocess.Popen(["wrk", "-t2", f"-c{len(ids)}", "-d25s", "--timeout", "40s", "--latency", "-s",
                                 os.path.join(ROOT, "bench/polls.lua"), dep.url], env=env_w,
                                stdout=subprocess.PIPE, text=True)
        time.sleep(5)
        cpu = Cpu([api.pid])
        before = cpu.snapshot()
        time.sleep(10)
        idle = {k: v - before[k] for k, v in cpu.snapshot().items()}
        rss_held = vm_rss_mb(api.pid)
        t0 = time.time()
        dep.start("worker")
        out = held.communicate()[0]
        statuses = dict(re.findall(r"status (\d+): (\d+)", out))
        print(f"\n## waits: {len(ids)} long polls held on pending orders (wrk -c{len(ids)})")
        print(f"API RSS {rss_before:.1f} MB before, {rss_held:.1f} MB while they are held "
              f"(+{rss_held - rss_before:.1f} MB)")
        print(f"API CPU while held and nothing changes: {idle['seckill'] / HZ / 10 * 100:.2f} % of a core "
              f"(Postgres {idle['postgres'] / HZ / 10 * 100:.2f} %, Redis {idle['redis'] / HZ / 10 * 100:.2f} %)")
        print(f"`seckill worker` started {time.time() - t0:.1f}s before wrk's end; wrk statuses {statuses}")
        for f in (tokens, pairs):
            os.unlink(f)
        return {"rss MB held": rss_held - rss_before, "idle % of a core": idle["seckill"] / HZ / 10 * 100}
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
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["cost", "drain", "sale", "refuse", "floor", "polls", "waits"])
    ap.add_argument("--pending", action="store_true", help="polls: orders left pending (no worker)")
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
           "floor": run_floor, "polls": run_polls, "waits": run_waits}[args.what]
    bins = [os.path.abspath(b) for b in args.bin] or [bench_env.BIN]
    results = {b: [] for b in bins}
    for r in range(args.runs):
        # Alternating, and the order reversed every other round (A B, B A, ...):
        # a machine that drifts during the runs favours neither binary.
        for b in (bins if r % 2 == 0 else bins[::-1]):
            bench_env.BIN = b
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

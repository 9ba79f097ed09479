#!/usr/bin/env python3
"""Fails if a file of src/ holds SQL on a table its area does not own, or a file
of src/http/ reaches past the services to a pool or to Redis.

Each business area owns its Postgres tables (`OWNERS` below, by the name of an
area or a module of `//! # Layout` in src/lib.rs): only the files of its modules
hold SQL on them; another area calls its service. A file "holds SQL on" a table
when its text names it after FROM, INTO, UPDATE, JOIN, TABLE, TRUNCATE, USING or
LOCK (what a query on it reads or writes), in the code outside its
`#[cfg(test)] mod tests`. Every table a migration creates must have an owner.
A handler calls the areas' services (`state.sales`, `state.admit`, ...): a file of
src/http/ that reaches `.handles` (the pools, Redis, the broker: the background
tasks' own) or the background pool, names `state.pg` or `state.redis`, opens
a Redis connection (`.conn()`), or calls an area's statements (`repo::`,
`pg_stock::`, `stored::`, `topup::`, `sql::` functions) is out of place too (src/http/state.rs, which holds
the handles for the background tasks, and src/http/idempotency.rs, which owns its
table, excepted).
Redis keys and RabbitMQ names are named by `Keys` (src/keys/names.rs); each of its
methods has owners (`KEY_OWNERS`): only their files name that key (a call of it on
`keys`, `k`, `keys()` or `Keys::`), and every method must have an entry.
Usage: sql_owners.py [ROOT | --self-test]. Prints each file and table or key out of
place."""
import os, re, sys

OWNERS = {
    # sales: vouchers, their stock and top-ups
    "vouchers": "sales", "seckill_vouchers": "sales", "stock_topups": "sales",
    # ordering: orders and their way from Redis to Postgres, and their life after
    "voucher_orders": "ordering", "stock_returns": "ordering", "relay_intents": "ordering",
    "outbox_format": "ordering", "outbox_processes": "ordering", "dead_letters": "ordering",
    "worker_heartbeats": "ordering",
    # admission: queues, raffles, per-address caps
    "admission_queues": "admission", "queue_places": "admission", "queue_admits": "admission",
    "raffles": "admission", "raffle_entries": "admission", "raffle_beacons": "admission",
    "admission_addresses": "admission",
    # recovery: each sale's generation and repair, the floors relays recorded
    "sale_states": "recovery", "shard_floors": "recovery", "shard_points": "recovery",
    # numbers: counters' ranges and business numbers' rules
    "counter_watermarks": "numbers", "sequence_rules": "numbers",
    # base and edge modules that keep a table of their own
    "fencing_tokens": "locks", "idempotency_keys": "http",
}

# A sale's shard (one hash tag): sales makes it (loads a sale, moves units between
# shards, applies top-ups); ordering writes it in the order script and the relay
# reads its outbox; recovery reads and rebuilds all of it in a repair.
SHARD = ("sales", "ordering", "recovery")
KEY_OWNERS = {
    "stock_at": SHARD, "seq_at": SHARD, "hist_at": SHARD, "admitted_at": SHARD, "returned_at": SHARD, "outbox_at": SHARD,
    "stock": SHARD, "admitted": SHARD, "returned": SHARD, "outbox": SHARD, "buyers": SHARD, "orders": SHARD,
    "topups": SHARD,
    # The marks of shoppers: the order script writes them, the lookup reads them.
    "buyers_at": ("ordering", "recovery"),
    # Kept by sales alone (the repair reads them back).
    "orders_at": ("sales", "recovery"), "topups_at": ("sales", "recovery"),
    "given_at": ("sales", "recovery"), "moved_at": ("sales", "recovery"), "taken_at": ("sales", "recovery"),
    "moves": ("sales",), "moves_of": ("sales",), "refill_lease": ("sales",), "events": ("sales",),
    # Corrupt outbox entries a repair moved aside.
    "quarantine_at": ("recovery",),
    # The set of outbox streams: a sale registers its own; the relays read them all.
    "outboxes": ("sales", "ordering"), "outbox_member": ("sales",), "outbox_of_member": ("ordering",),
    "of_tag": ("ordering", "recovery"), "tag_of": ("ordering",),
    "lock": ("locks",), "lock_fence": ("locks",), "lock_released": ("locks",), "fence_seen": ("locks",),
    "counter_witness": ("numbers",),
    # RabbitMQ: the broker declares the topology; ordering publishes and consumes.
    "orders_exchange": ("broker", "ordering"), "orders_queue": ("broker", "ordering"),
    "dead_exchange": ("broker",), "dead_queue": ("broker", "ordering"), "delay_queue": ("broker", "ordering"),
    "timeout_exchange": ("broker",), "timeout_queue": ("broker", "ordering"),
}
NOT_KEYS = ("new", "namespace")

SQL_BEFORE = r"(?:FROM|INTO|UPDATE|JOIN|TABLE|TRUNCATE|USING|LOCK)\s+(?:ONLY\s+)?(?:IF\s+EXISTS\s+)?(?:[a-z_]+\.)?"


def layout(lib):
    """The modules of each name of the layout (an area's name, or a module's)."""
    section = "\n".join(l[3:].strip() if l.startswith("//!") else "" for l in lib.split("//! # Layout", 1)[-1].splitlines())
    section = re.sub(r"\n(?!- |\n)", " ", section)
    modules = {}
    for m in re.finditer(r"^- (?:edge|report|area|base) ([a-z]+): ((?:`[a-z_]+`(?:, )?)+)", section, re.M):
        names = re.findall(r"`([a-z_]+)`", m.group(2))
        modules.setdefault(m.group(1), set()).update(names)
        for n in names:
            modules.setdefault(n, set()).add(n)
    return modules


def check(root, owners=OWNERS, key_owners=KEY_OWNERS):
    src = os.path.join(root, "src")
    modules = layout(open(os.path.join(src, "lib.rs")).read())
    problems = []
    created = set()
    mig = os.path.join(root, "migrations")
    for n in sorted(os.listdir(mig)) if os.path.isdir(mig) else []:
        text = open(os.path.join(mig, n)).read()
        created |= set(re.findall(r"(?i)create\s+table\s+(?:if\s+not\s+exists\s+)?([a-z_]+)", text))
        # A table a later migration drops needs no owner.
        created -= set(re.findall(r"(?i)drop\s+table\s+(?:if\s+exists\s+)?([a-z_]+)", text))
    problems += [f"table {t} (created by a migration) has no owner in scripts/sql_owners.py" for t in sorted(created - set(owners))]
    problems += [f"owner {o} of {t} is not a name of the layout in src/lib.rs" for t, o in sorted(owners.items()) if o not in modules]
    names = os.path.join(src, "keys", "names.rs")
    methods = [m for m in re.findall(r"pub(?:\([a-z]+\))?\s+(?:const\s+|async\s+)*fn\s+(\w+)", open(names).read()) if m not in NOT_KEYS] if os.path.exists(names) else []
    problems += [f"key {m} (a method of Keys) has no owner in scripts/sql_owners.py" for m in methods if m not in key_owners]
    problems += [f"owner {o} of key {k} is not a name of the layout in src/lib.rs" for k, os_ in sorted(key_owners.items()) for o in os_ if o not in modules]
    named = re.compile(r"(?:\b(?:keys(?:\(\))?|k)\s*\.\s*|\bKeys::)(" + "|".join(methods or ["$^"]) + r")\(")
    for dirpath, _, names in os.walk(src):
        for n in sorted(names):
            if not n.endswith(".rs") or n == "tests.rs":
                continue
            path = os.path.join(dirpath, n)
            rel = os.path.relpath(path, src)
            top = rel.split(os.sep)[0].removesuffix(".rs")
            text = re.split(r"#\[cfg\(test\)\]\s*mod tests\s*\{", open(path).read())[0]
            text = re.sub(r"//[^\n]*", "", text)
            if rel.startswith("http" + os.sep) and n not in ("state.rs", "idempotency.rs"):
                for m in re.finditer(r"\.\s*(?:handles|background_pg)\b|\b(?:state|owned)\s*\.\s*(?:pg|redis)\b|\.conn\(\)|\b(?:repo|pg_stock|stored|topup|sql)::[a-z_]+\s*\(", text):
                    problems.append(f"src/{rel} reaches past the services: {m.group(0)}")
            for table, owner in sorted(owners.items()):
                if top not in modules.get(owner, set()) and re.search(SQL_BEFORE + table + r"\b", text):
                    problems.append(f"src/{rel} holds SQL on {table}, which {owner} owns: call {owner}'s service")
            if top != "keys":
                for m in named.finditer(text):
                    allowed = set().union(*(modules.get(o, set()) for o in key_owners.get(m.group(1), ())))
                    if top not in allowed:
                        problems.append(f"src/{rel} names the key {m.group(1)}, which {'/'.join(key_owners[m.group(1)])} own(s)")
    for p in problems:
        print("sql owners:", p)
    return 1 if problems else 0


def self_test():
    """The check on small trees of its own."""
    import tempfile
    lib = "//! # Layout\n//! - area sales: `voucher`\n//! - area ordering: `order`,\n//!   `worker`\npub mod order;\n"
    cases = {
        "an owner's own file": ({"src/voucher/repo.rs": 'const Q: &str = "SELECT stock FROM seckill_vouchers";'}, 0),
        "another area's file": ({"src/worker/steps.rs": 'const Q: &str = "UPDATE seckill_vouchers SET stock = 1";'}, 1),
        "an area of two modules": ({"src/worker/steps.rs": 'const Q: &str = "INSERT INTO voucher_orders";'}, 0),
        "a comment or a test": ({"src/order/a.rs": "// FROM seckill_vouchers\n#[cfg(test)]\nmod tests {\n const Q: &str = \"FROM stock_topups\"; }\n"}, 0),
        "a table with no owner": ({"migrations/0001_x.sql": "CREATE TABLE unowned (id bigint);"}, 1),
        "a dropped table with no owner": ({"migrations/0001_x.sql": "CREATE TABLE unowned (id bigint);", "migrations/0002_y.sql": "DROP TABLE IF EXISTS unowned;"}, 0),
        "a handler with a pool": ({"src/http/orders.rs": "fn f(state: &S) { g(&state.pg) }"}, 1),
        "a handler with the handles": ({"src/http/orders.rs": "fn f(state: &S) { g(&state\n    .handles.pg) }"}, 1),
        "a handler with a clone of the state": ({"src/http/orders.rs": "fn f(owned: &S) { g(&owned.handles.pg) }"}, 1),
        "a handler with an area's statements": ({"src/http/sales.rs": "fn f(tx: &mut T) { repo::get(tx, 1) }"}, 1),
        "a handler with an area's type": ({"src/http/stock.rs": "use a::topup::{NotRecorded, TopUp};"}, 0),
        "a handler recording a top-up": ({"src/http/stock.rs": "fn f(tx: &mut T) { topup::record(tx, 1, 2) }"}, 1),
        "a handler with a service": ({"src/http/orders.rs": "fn f(state: &S) { state.sales.get(1) }"}, 0),
        "a key in its owner's file": ({"src/voucher/load.rs": "fn f(k: &Keys) { k.stock_at(1, 0, 1); }"}, 0),
        "a key in another area's file": ({"src/worker/a.rs": "fn f(s: &S) { s.keys.stock_at(1, 0, 1); }"}, 1),
        "a key named statically elsewhere": ({"src/worker/a.rs": "fn f() { Keys::stock_at(1, 0, 1); }"}, 1),
        "a key with no owner": ({"src/keys/names.rs": "pub fn new() {}\npub fn stock_at() {}\npub fn unowned() {}"}, 1),
        "a const key with no owner": ({"src/keys/names.rs": "pub fn new() {}\npub fn stock_at() {}\npub const fn unowned() {}"}, 1),
        "a method of another type": ({"src/worker/a.rs": "fn f(m: &M) { m.stock_at(1); }"}, 0),
    }
    for name, (tree, want) in cases.items():
        with tempfile.TemporaryDirectory() as d:
            keys = {"src/keys/names.rs": "pub fn new() {}\npub fn stock_at() {}"}
            for path, text in {"src/lib.rs": lib, **keys, **tree}.items():
                os.makedirs(os.path.dirname(os.path.join(d, path)), exist_ok=True)
                with open(os.path.join(d, path), "w") as f:
                    f.write(text)
            import contextlib, io
            with contextlib.redirect_stdout(io.StringIO()):
                tables = {"seckill_vouchers": "sales", "stock_topups": "sales", "voucher_orders": "ordering"}
                got = check(d, tables, {"stock_at": ("sales",)})
            if got != want:
                sys.exit(f"sql_owners self-test failed: {name}: exit {got}, wanted {want}")
    print("sql_owners: self-test passed")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        self_test()
        sys.exit(0)
    sys.exit(check(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")))

#!/usr/bin/env python3
"""Validates docker-compose.yml (and its cluster and ha variants) without a Docker engine: it must parse as YAML,
define the services the README promises with what each needs, and point only at
services and a Dockerfile that exist. And ship as a careful operator would: no
secret written in either compose file (each one `${VAR:?...}`, so that `up` refuses
to start without it), the application connecting to Postgres as a role of its own
that an init script creates without superuser rights, and an image built with
`cargo build --locked` from every directory the crate compiles in."""
import os
import re
import subprocess
import sys

try:
    import yaml
except ImportError:  # a fresh machine: PyYAML from PyPI
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "pyyaml"], check=True)
    import yaml


def fail(msg):
    print(f"check_compose: {msg}", file=sys.stderr)
    sys.exit(1)


path = sys.argv[1] if len(sys.argv) > 1 else "docker-compose.yml"
with open(path, encoding="utf-8") as f:
    doc = yaml.safe_load(f)
services = doc.get("services") or fail("no services")
for name in ["postgres", "redis", "rabbitmq", "api", "worker"]:
    if name not in services:
        fail(f"service {name!r} is missing")
redis_cmd = " ".join(services["redis"].get("command", []))
if "--appendonly yes" not in redis_cmd:
    fail("redis must run with AOF persistence (--appendonly yes)")
for name, cmd in [("api", "serve"), ("worker", "worker")]:
    svc = services[name]
    if svc.get("command") != [cmd]:
        fail(f"service {name} must run `seckill {cmd}`")
    if "build" not in svc:
        fail(f"service {name} must be built from the Dockerfile")
    env = svc.get("environment") or {}
    for var in ["DATABASE_URL", "REDIS_URL", "AMQP_URL", "SECKILL_JWT_SECRET"]:
        if var not in env:
            fail(f"service {name} lacks {var}")
for name, svc in services.items():
    for dep in svc.get("depends_on") or {}:
        if dep not in services:
            fail(f"{name} depends on unknown service {dep}")
    for vol in svc.get("volumes") or []:
        src = vol.split(":")[0]
        if not src.startswith((".", "/")) and src not in (doc.get("volumes") or {}):
            fail(f"{name} uses undeclared volume {src}")
root = os.path.dirname(os.path.abspath(path))
dockerfile = open(os.path.join(root, "Dockerfile"), encoding="utf-8").read()
stages = [l for l in dockerfile.splitlines() if l.upper().startswith("FROM ")]
if len(stages) < 2 or " AS " not in stages[0].upper():
    fail("the Dockerfile must be multi-stage")

# --- secrets: only from the environment, required -------------------------------
REQUIRED_VAR = re.compile(r"^\$\{[A-Z_][A-Z0-9_]*:\?[^}]*\}$")
SECRET_NAME = re.compile(r"(PASSWORD|PASSWD|SECRET|_PASS$|TOKEN|API_KEY)")
# scheme://user:password@host: the password part.
URL_PASSWORD = re.compile(r"^[a-z][a-z0-9+.-]*://[^:/@]*:((?:\$\{[^}]*\})|[^@]*)@")


def check_secrets(file_name, document):
    for name, svc in (document.get("services") or {}).items():
        env = svc.get("environment") or {}
        if isinstance(env, list):
            env = dict(e.split("=", 1) if "=" in e else (e, "") for e in env)
        for var, value in env.items():
            value = "" if value is None else str(value)
            where = f"{file_name}: {name}.{var}"
            if SECRET_NAME.search(var) and not REQUIRED_VAR.match(value):
                fail(f"{where} must come from the environment as ${{VAR:?message}}, not be written in the file")
            m = URL_PASSWORD.match(value)
            if m and not REQUIRED_VAR.match(m.group(1)):
                fail(f"{where} has a password written in its URL; use ${{VAR:?message}}")
        command = svc.get("command") or []
        command = " ".join(command) if isinstance(command, list) else str(command)
        m = re.search(r"--requirepass\s+(\S+)", command)
        if m and "$" not in m.group(1):
            fail(f"{file_name}: {name} has a password written in its command")


check_secrets(os.path.basename(path), doc)

# --- Postgres: the application is not the superuser ----------------------------
pg_env = services["postgres"].get("environment") or {}
superuser = pg_env.get("POSTGRES_USER", "postgres")
app_url = str((services["api"].get("environment") or {}).get("DATABASE_URL", ""))
m = re.match(r"^postgres(?:ql)?://([^:@/]+)", app_url)
if not m:
    fail("the api's DATABASE_URL must name the role it connects as")
app_role = m.group(1)
if app_role == superuser:
    fail(f"the application connects to Postgres as its superuser {superuser!r}; give it a role of its own")
init_scripts = []
for vol in services["postgres"].get("volumes") or []:
    parts = vol.split(":")
    if len(parts) >= 2 and parts[1].startswith("/docker-entrypoint-initdb.d"):
        script = os.path.join(root, parts[0])
        if not os.path.isfile(script):
            fail(f"postgres mounts the init script {parts[0]}, which does not exist")
        init_scripts.append(open(script, encoding="utf-8").read())
creates = [
    t for t in init_scripts
    if "CREATE ROLE" in t and "NOSUPERUSER" in t and "NOCREATEROLE" in t and "OWNER" in t
]
if not creates:
    fail("postgres must mount an init script (/docker-entrypoint-initdb.d) that creates the application's "
         "role with NOSUPERUSER and NOCREATEROLE and gives it its database (OWNER)")
role_default = re.search(r"SECKILL_DB_USER:-([A-Za-z0-9_]+)", creates[0])
role_made = pg_env.get("SECKILL_DB_USER") or (role_default and role_default.group(1))
if role_made != app_role:
    fail(f"the init script creates the role {role_made!r} but the application connects as {app_role!r}")

# --- the image: locked dependencies, every compiled-in directory ----------------
builds = [l for l in dockerfile.splitlines() if re.search(r"\bcargo\s+build\b", l)]
if not builds:
    fail("the Dockerfile does not build with cargo")
for line in builds:
    if "--locked" not in line:
        fail(f"the Dockerfile must build with --locked (the tested Cargo.lock): {line.strip()}")
copied = set()
for line in dockerfile.splitlines():
    words = line.split()
    if words and words[0].upper() == "COPY" and not any(w.startswith("--from") for w in words):
        copied.update(w.rstrip("/").lstrip("./") for w in words[1:-1])
needed = set()
for folder, _, files in os.walk(os.path.join(root, "src")):
    for f in files:
        if f.endswith(".rs"):
            text = open(os.path.join(folder, f), encoding="utf-8").read()
            for inc in re.findall(r'(?:include_str|include_bytes)!\("([^"]+)"\)', text):
                target = os.path.relpath(os.path.normpath(os.path.join(folder, inc)), root)
                needed.add(target.split(os.sep)[0])
            for inc in re.findall(r'migrate!\("([^"]+)"\)', text):
                needed.add(os.path.normpath(inc).split(os.sep)[0])
for top in sorted(needed - copied):
    fail(f"the Dockerfile does not COPY {top}/, which the crate compiles in")

# The Redis Cluster variant (docker-compose.cluster.yml, layered over the main file).
cluster_path = os.path.join(root, "docker-compose.cluster.yml")
with open(cluster_path, encoding="utf-8") as f:
    cluster = yaml.safe_load(f)
cservices = cluster.get("services") or fail("the cluster variant has no services")
nodes = [n for n in cservices if n.startswith("redis-node-")]
if len(nodes) < 6:
    fail("the cluster variant needs 6 Redis nodes (3 masters, 3 replicas)")
for n in nodes:
    cmd = " ".join(cservices[n].get("command", []))
    if "--cluster-enabled yes" not in cmd or "--appendonly yes" not in cmd:
        fail(f"{n} must run with --cluster-enabled yes and AOF")
if "--cluster-replicas 1" not in " ".join(cservices["redis-cluster-init"].get("command", [])):
    fail("redis-cluster-init must create the cluster with one replica per master")
for name in ["api", "worker"]:
    env = (cservices.get(name) or {}).get("environment") or {}
    if env.get("SECKILL_REDIS_CLUSTER") != "true" or "," not in env.get("REDIS_URL", ""):
        fail(f"{name} of the cluster variant must set SECKILL_REDIS_CLUSTER and list seed nodes")
check_secrets("docker-compose.cluster.yml", cluster)
merged = set(services) | set(cservices)
for name, svc in cservices.items():
    for dep in svc.get("depends_on") or {}:
        if dep not in merged:
            fail(f"{name} (cluster variant) depends on unknown service {dep}")

# The clustered RabbitMQ and Postgres variant (docker-compose.ha.yml, layered over
# the main file): three RabbitMQ nodes that form one cluster with one cookie, the
# classic queues mirrored, a Postgres standby made from the primary that streams
# from it with synchronous commits, and the API and worker given every node and
# the standby.
ha_path = os.path.join(root, "docker-compose.ha.yml")
with open(ha_path, encoding="utf-8") as f:
    ha = yaml.safe_load(f)
hservices = ha.get("services") or fail("the ha variant has no services")
rabbits = sorted(n for n in hservices if re.fullmatch(r"rabbitmq-\d+", n))
if len(rabbits) < 3:
    fail("the ha variant needs three RabbitMQ nodes (rabbitmq-1..3)")
cookies = set()
for n in rabbits:
    svc = hservices[n]
    if svc.get("hostname") != n:
        fail(f"{n} must have the hostname {n} (its node name is rabbit@{n})")
    env = svc.get("environment") or {}
    cookies.add(env.get("RABBITMQ_ERLANG_COOKIE"))
    mounts = [v for v in svc.get("volumes") or [] if "/etc/rabbitmq/conf.d/" in v]
    if not mounts:
        fail(f"{n} must mount the cluster formation config into /etc/rabbitmq/conf.d/")
    conf = open(os.path.join(root, mounts[0].split(":")[0]), encoding="utf-8").read()
    for other in rabbits:
        if f"rabbit@{other}" not in conf:
            fail(f"{mounts[0].split(':')[0]} does not name rabbit@{other}")
if len(cookies) != 1 or not REQUIRED_VAR.match(str(next(iter(cookies)))):
    fail("the RabbitMQ nodes must share one Erlang cookie, from the environment (${VAR:?...})")
policy = " ".join((hservices.get("rabbitmq-policy") or {}).get("command") or [])
if "ha-mode" not in policy or "orders\\.(dead|delay|timeout)" not in policy:
    fail("rabbitmq-policy must mirror the classic queues (orders.dead, .delay, .timeout)")
standby = hservices.get("postgres-standby") or fail("the ha variant needs postgres-standby")
standby_cmd = " ".join(standby.get("command") or [])
if "pg_basebackup" not in standby_cmd or " -R" not in standby_cmd or "-h postgres" not in standby_cmd:
    fail("postgres-standby must be made from the primary with pg_basebackup -R -h postgres")
if "synchronous_standby_names = ''" not in standby_cmd:
    fail("postgres-standby must clear the synchronous_standby_names it copies from the primary "
         "(promoted, it would wait for a standby of its own on every commit)")
replication = [v for v in (hservices.get("postgres") or {}).get("volumes") or []
               if "/docker-entrypoint-initdb.d" in v]
if not replication:
    fail("the primary must mount an init script that sets up replication")
init = open(os.path.join(root, replication[0].split(":")[0]), encoding="utf-8").read()
for setting in ["synchronous_commit = on", "synchronous_standby_names", "host replication"]:
    if setting not in init:
        fail(f"{replication[0].split(':')[0]} must set {setting!r}")
for name in ["api", "worker"]:
    env = (hservices.get(name) or {}).get("environment") or {}
    waits = (hservices.get(name) or {}).get("depends_on") or {}
    if "postgres-standby" not in waits or "rabbitmq-policy" not in waits:
        fail(f"{name} of the ha variant must wait for postgres-standby and rabbitmq-policy")
    nodes = [u for u in str(env.get("AMQP_URL", "")).split(",") if u]
    if sorted(re.sub(r"^.*@([^:/]+).*$", r"\1", u) for u in nodes) != rabbits:
        fail(f"{name} of the ha variant must list every RabbitMQ node in AMQP_URL")
    for u in nodes:
        m = URL_PASSWORD.match(u)
        if m and not REQUIRED_VAR.match(m.group(1)):
            fail(f"{name}.AMQP_URL has a password written in a URL; use ${{VAR:?message}}")
    if "@postgres-standby:" not in str(env.get("SECKILL_DATABASE_STANDBY_URLS", "")):
        fail(f"{name} of the ha variant must name postgres-standby in SECKILL_DATABASE_STANDBY_URLS")
check_secrets("docker-compose.ha.yml", ha)
merged = set(services) | set(cservices) | set(hservices)
for name, svc in hservices.items():
    for dep in svc.get("depends_on") or {}:
        if dep not in merged:
            fail(f"{name} (ha variant) depends on unknown service {dep}")
    for vol in svc.get("volumes") or []:
        src = vol.split(":")[0]
        if src.startswith("."):
            if not os.path.exists(os.path.join(root, src)):
                fail(f"{name} (ha variant) mounts {src}, which does not exist")
        elif not src.startswith("/") and src not in (ha.get("volumes") or {}):
            fail(f"{name} (ha variant) uses undeclared volume {src}")

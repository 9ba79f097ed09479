#!/usr/bin/env python3
"""Validates docker-compose.yml without a Docker engine: it must parse as YAML,
define the services the README promises with what each needs, and point only at
services and a Dockerfile that exist."""
import os
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
merged = set(services) | set(cservices)
for name, svc in cservices.items():
    for dep in svc.get("depends_on") or {}:
        if dep not in merged:
            fail(f"{name} (cluster variant) depends on unknown service {dep}")

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

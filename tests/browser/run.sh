#!/usr/bin/env bash
# Runs a script of this folder in Node with its locked dependencies (playwright-core,
# driving the Debian package's Chromium at /usr/bin/chromium): `npm ci` first when
# node_modules is missing or older than the lockfile. Says clearly what is missing
# (scripts/services.sh installs both) and fails.
#   tests/browser/run.sh console.mjs URL TOKEN VOUCHER ...
set -euo pipefail
cd "$(dirname "$0")"
command -v node >/dev/null || { echo "browser test: node not found; run scripts/services.sh (installs nodejs and npm)" >&2; exit 127; }
command -v npm >/dev/null || { echo "browser test: npm not found; run scripts/services.sh (installs npm)" >&2; exit 127; }
[ -x /usr/bin/chromium ] || { echo "browser test: /usr/bin/chromium not found; run scripts/services.sh (installs the Debian package chromium)" >&2; exit 127; }
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error >&2
fi
exec node "$@"

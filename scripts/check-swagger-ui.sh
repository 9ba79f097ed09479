#!/usr/bin/env bash
# Loads the Swagger UI page of a running server in headless Chromium with its
# background networking off (the assets are vendored: the page needs nothing but
# the server) and checks that every operation of the OpenAPI document is rendered.
#   scripts/check-swagger-ui.sh [URL]
set -euo pipefail
URL=${1:-http://127.0.0.1:8080}
command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
dom=$(chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$profile" --virtual-time-budget=8000 \
  --dump-dom "$URL/api-docs/" 2>/dev/null)
rendered=$(grep -o 'class="opblock-summary-path"' <<<"$dom" | wc -l)
expected=$(curl -fsS "$URL/api-docs/openapi.json" | python3 -c 'import json,sys; print(sum(len(p) for p in json.load(sys.stdin)["paths"].values()))')
echo "Swagger UI rendered $rendered of $expected operations"
[ "$rendered" -eq "$expected" ]

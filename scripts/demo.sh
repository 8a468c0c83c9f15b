#!/usr/bin/env bash
# The main job on the embedded default: install, build, start the command server with the demo
# command module, discover its commands and call one — then stop it.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "installing dependencies"
scripts/install-deps.sh --no-bench

step "building (release preset)"
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target abx-server abx_demo_commands

bin=build/release/src/server/abx-server
module=build/release/examples/commands/libabx_demo_commands.so
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
out=$(mktemp)
trap 'kill "$pid" 2>/dev/null || true; rm -f "$out"' EXIT

step "starting abx-server --module $(basename "$module")"
ABX_ACCESS_TOKEN=$token "$bin" --module "$module" --port 0 >"$out" &
pid=$!
for _ in $(seq 100); do grep -q '^listening on' "$out" && break; sleep 0.05; done
addr=$(sed -n 's/^listening on //p' "$out")
[ -n "$addr" ] || { echo "abx-server did not start" >&2; exit 1; }
echo "listening on $addr"

step "GET /commands (discovery)"
curl -fsS -H "X-Access-Token: $token" "http://$addr/commands" | head -c 400; echo ' …'

step 'POST /commands/demo {"x":42,"y":"world"}'
curl -fsS -H "X-Access-Token: $token" -H 'Content-Type: application/json' \
  -d '{"x":42,"y":"world"}' "http://$addr/commands/demo"; echo

step "stopping (SIGTERM drains calls in progress)"
kill -TERM "$pid"; wait "$pid"
echo "done"

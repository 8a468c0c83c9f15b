#!/usr/bin/env bash
# The main job on the embedded default: install, build, start abxd, create a sandbox from the
# `demo` template, discover its registered commands and call one through abxd's proxy — then
# kill the sandbox and stop abxd. Needs root (namespaces, cgroups).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }
[ "$(id -u)" = 0 ] || { echo "demo.sh: run as root (abxd creates namespaces and cgroups)" >&2; exit 1; }

step "installing dependencies"
scripts/install-deps.sh --no-bench --no-criu

step "building (release preset)"
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target abxd abx-envd abx-server abx_demo_commands

step "building the base image (Debian bookworm via mmdebstrap; cached after the first run)"
scripts/build-images.sh --store build/images --abxd build/release/src/platform/abxd --only base

home=$(mktemp -d /tmp/abx-demo.XXXXXX)
out="$home/abxd.out"
pid=""
cleanup() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$home"
}
trap cleanup EXIT

step "starting abxd (home $home)"
build/release/src/platform/abxd --home "$home" --image-store build/images --listen 127.0.0.1:0 --kill-sandboxes >"$out" 2>"$home/abxd.log" &
pid=$!
for _ in $(seq 200); do grep -q '^listening on' "$out" && break; sleep 0.05; done
addr=$(sed -n 's/^listening on //p' "$out")
[ -n "$addr" ] || { echo "abxd did not start:" >&2; cat "$home/abxd.log" >&2; exit 1; }
key=$(cat "$home/api_key")
echo "abxd listening on $addr (API key in $home/api_key)"

step "POST /sandboxes {\"templateID\":\"demo\"}"
created=$(curl -fsS -X POST -H "X-API-KEY: $key" -H 'Content-Type: application/json' \
  -d '{"templateID":"demo","timeout":120}' "http://$addr/sandboxes")
echo "$created"
id=$(echo "$created" | sed -n 's/.*"sandboxID":"\([a-z0-9]*\)".*/\1/p')
token=$(echo "$created" | sed -n 's/.*"envdAccessToken":"\([a-f0-9]*\)".*/\1/p')

route=(-H "E2b-Sandbox-Id: $id" -H "E2b-Sandbox-Port: 49982" -H "X-Access-Token: $token")
for _ in $(seq 100); do  # the command server starts just after envd
  code=$(curl -s -o /dev/null -w '%{http_code}' "${route[@]}" "http://$addr/commands") || true
  [ "$code" = 200 ] && break; sleep 0.05
done

step "GET /commands in sandbox $id (discovery, through abxd)"
curl -fsS "${route[@]}" "http://$addr/commands" | head -c 300; echo ' …'

step 'POST /commands/demo {"x":42,"y":"world"}'
curl -fsS "${route[@]}" -H 'Content-Type: application/json' -d '{"x":42,"y":"world"}' \
  "http://$addr/commands/demo"; echo

step "DELETE /sandboxes/$id"
curl -fsS -o /dev/null -w '%{http_code}\n' -X DELETE -H "X-API-KEY: $key" "http://$addr/sandboxes/$id"
echo "done"

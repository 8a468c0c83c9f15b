#!/usr/bin/env bash
# MCP vs REST on one abx-server (issue 6): `tools/call demo` over POST /mcp against
# POST /commands/demo, same arguments, same keep-alive wrk load, printed as a ratio (aim: MCP
# within 1.5x of REST). Builds abx-server (release preset) first unless --no-build.
# Usage: bench/mcp_vs_http.sh [--no-build] [--duration S] [--connections 1,16] [--rounds N]
#                             [--abx-server P] [--abx-module P] [--no-pin] [--out DIR]
# Not a test: never run from .ci/run. Passed through by bench/run.sh (unknown flags ignored).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
# shellcheck source=/dev/null
. "$here/lib/load.sh"
cd "$root"

build=1
pin=1
duration="${BENCH_DURATION:-5}"
connections="${BENCH_CONNECTIONS:-1,16}"
rounds=2
server_bin=build/release/src/server/abx-server
module=build/release/examples/commands/libabx_demo_commands.so
out_dir=bench/out
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    --no-pin) pin=0 ;;
    --duration) duration="$2"; shift ;;
    --connections) connections="$2"; shift ;;
    --rounds) rounds="$2"; shift ;;
    --abx-server) server_bin="$2"; shift ;;
    --abx-module) module="$2"; shift ;;
    --out) out_dir="$2"; shift ;;
    *) ;;  # options meant for other bench scripts (bench/run.sh passes everything on)
  esac
  shift
done

for tool in wrk curl; do
  command -v "$tool" >/dev/null || { echo "[mcp] $tool is required (scripts/install-deps.sh)" >&2; exit 1; }
done
mkdir -p "$out_dir"
if [ "$build" = 1 ]; then
  echo "[mcp] building abx-server and the demo module (release preset); log: $out_dir/build-mcp.log" >&2
  if ! { cmake --preset release && cmake --build --preset release --target abx-server abx_demo_commands; } \
      >"$out_dir/build-mcp.log" 2>&1; then
    grep -m 8 -E 'error|Error' "$out_dir/build-mcp.log" >&2 || tail -n 15 "$out_dir/build-mcp.log" >&2
    exit 1
  fi
fi
[ -x "$server_bin" ] || { echo "[mcp] no abx-server at $server_bin" >&2; exit 1; }

server_cpu=() client_cpu=()
if [ "$pin" = 1 ] && command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
  server_cpu=(taskset -c 1) client_cpu=(taskset -c 0)
fi

tmp="$(mktemp -d)"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

token="bench-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
ABX_ACCESS_TOKEN="$token" "${server_cpu[@]}" "$server_bin" --module "$module" --port 0 \
  --log-level warn >"$tmp/server.out" 2>"$tmp/server.err" &
pid=$!
for _ in $(seq 100); do
  grep -q "listening on" "$tmp/server.out" 2>/dev/null && break
  sleep 0.1
done
addr="$(sed -n 's/^listening on //p' "$tmp/server.out")"
[ -n "$addr" ] || { echo "[mcp] abx-server did not start:" >&2; cat "$tmp/server.err" >&2; exit 1; }
url="http://$addr"

# Open an MCP session, then check that both routes answer the same thing before measuring.
init='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}'
sid="$(curl -sS -D - -o /dev/null -H "X-Access-Token: $token" -H 'Content-Type: application/json' \
  -d "$init" "$url/mcp" | tr -d '\r' | sed -n 's/^[Mm]cp-[Ss]ession-[Ii]d: //p')"
[ -n "$sid" ] || { echo "[mcp] initialize gave no Mcp-Session-Id" >&2; exit 1; }
mcp_headers=(-H "X-Access-Token: $token" -H 'Content-Type: application/json'
             -H "Mcp-Session-Id: $sid" -H 'MCP-Protocol-Version: 2025-06-18')
curl -sS -o /dev/null "${mcp_headers[@]}" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' "$url/mcp"
rest_body='{"x":42,"y":"world"}'
mcp_body='{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"demo","arguments":{"x":42,"y":"world"}}}'
rest_answer="$(curl -sS -H "X-Access-Token: $token" -H 'Content-Type: application/json' -d "$rest_body" "$url/commands/demo")"
mcp_answer="$(curl -sS "${mcp_headers[@]}" -d "$mcp_body" "$url/mcp")"
[ "$rest_answer" = '{"result":"42: world"}' ] || { echo "[mcp] REST answered: $rest_answer" >&2; exit 1; }
case "$mcp_answer" in
  *'"structuredContent":{"result":"42: world"}'*'"isError":false'*) ;;
  *) echo "[mcp] tools/call answered: $mcp_answer" >&2; exit 1 ;;
esac

printf 'wrk.method = "POST"\nwrk.body = [[%s]]\n' "$rest_body" >"$tmp/rest.lua"
printf 'wrk.method = "POST"\nwrk.body = [[%s]]\n' "$mcp_body" >"$tmp/mcp.lua"

# Prints "<requests/s> <mean latency in us>" for one wrk run.
run_wrk() {  # kind connections seconds
  local kind="$1" c="$2" secs="$3" path headers
  if [ "$kind" = rest ]; then
    path=/commands/demo headers=(-H "X-Access-Token: $token" -H 'Content-Type: application/json')
  else
    path=/mcp headers=("${mcp_headers[@]}")
  fi
  "${client_cpu[@]}" wrk -t1 -c"$c" -d"${secs}s" "${headers[@]}" -s "$tmp/$kind.lua" "$url$path" \
    >"$tmp/wrk.txt" 2>&1 || { cat "$tmp/wrk.txt" >&2; return 1; }
  if grep -q "Non-2xx" "$tmp/wrk.txt"; then
    echo "[mcp] $kind: non-2xx answers under load:" >&2; cat "$tmp/wrk.txt" >&2; return 1
  fi
  awk '/Requests\/sec/ {rps=$2}
       /^ +Latency/ {v=$2; u=v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v);
                     lat = u=="us" ? v : u=="ms" ? v*1000 : u=="s" ? v*1e6 : v}
       END {printf "%.0f %.1f\n", rps, lat}' "$tmp/wrk.txt"
}

echo "[mcp] abx-server $server_bin on $addr; $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg);" \
     "pinned: $([ ${#server_cpu[@]} -gt 0 ] && echo 'server cpu1, wrk cpu0' || echo no)" >&2
printf '%-6s %-5s %12s %12s %12s %12s %8s\n' conns round rest_rps mcp_rps rest_lat_us mcp_lat_us ratio
json_rows=()
IFS=, read -ra conn_list <<<"$connections"
for c in "${conn_list[@]}"; do
  run_wrk rest "$c" 1 >/dev/null && run_wrk mcp "$c" 1 >/dev/null  # warm-up
  for r in $(seq "$rounds"); do
    read -r rest_rps rest_lat < <(run_wrk rest "$c" "$duration")
    read -r mcp_rps mcp_lat < <(run_wrk mcp "$c" "$duration")
    [ -n "${rest_rps:-}" ] && [ -n "${mcp_rps:-}" ] || { echo "[mcp] a wrk run failed" >&2; exit 1; }
    ratio="$(awk -v a="$rest_rps" -v b="$mcp_rps" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}')"
    printf '%-6s %-5s %12s %12s %12s %12s %7sx\n' "$c" "$r" "$rest_rps" "$mcp_rps" "$rest_lat" \
      "$mcp_lat" "$ratio"
    # bench/run.sh's summary row, from the last round: "MCP within 1.5x of REST" is a ratio (how
    # many times better) >= 1/1.5.
    [ "$r" = "$rounds" ] && bench_row mcp_vs_http "MCP tools/call demo, $c conns (round $r)" "$mcp_rps" \
      "REST POST /commands/demo, same server" "$rest_rps" calls/s higher ">=0.67x"
    json_rows+=("{\"connections\":$c,\"round\":$r,\"rest_rps\":$rest_rps,\"mcp_rps\":$mcp_rps,\"rest_latency_us\":$rest_lat,\"mcp_latency_us\":$mcp_lat,\"ratio\":$ratio}")
  done
done
echo "[mcp] ratio = REST requests/s / MCP tools/call requests/s (1.00 = same cost; aim <= 1.5)" >&2
echo "[mcp] load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
stamp="$(date +%Y%m%d-%H%M%S)"
(IFS=,; echo "{\"bench\":\"mcp_vs_http\",\"server\":\"$server_bin\",\"duration_s\":$duration,\"runs\":[${json_rows[*]}]}") \
  >"$out_dir/mcp_vs_http-$stamp.json"
echo "[mcp] wrote $out_dir/mcp_vs_http-$stamp.json" >&2

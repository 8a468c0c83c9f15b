#!/usr/bin/env bash
# Profiles abx-server under wrk: where one call's CPU goes (bench/README.md, "Where a call's CPU
# goes"). Not a benchmark of its own (bench/run.sh does not run lib/); run it under the bench lock:
#   flock /tmp/abx-bench.lock bench/lib/perf_command_server.sh [BUILD_DIR] [SECONDS] [CONNS]
# BUILD_DIR defaults to build/release. The server is pinned to CPU 1 and wrk to CPU 0, as in
# command_server.py. Prints the server's CPU per call (perf stat task-clock ÷ calls) and perf
# report's flat profile (self time per symbol and per DSO); perf.data stays in $out.
# BENCH_ABX_ARGS: extra abx-server flags (word-split), e.g. "--io-threads 2".
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$(dirname "$here")")"
build="${1:-$root/build/release}"
secs="${2:-5}"
conns="${3:-64}"
out="${BENCH_PERF_OUT:-$root/bench/out/perf-command-server}"
server="$build/src/server/abx-server"
module="$build/examples/commands/libabx_demo_commands.so"
for t in perf wrk taskset; do
  command -v "$t" >/dev/null || { echo "perf_command_server: $t missing; run scripts/install-deps.sh" >&2; exit 1; }
done
[ -x "$server" ] || { echo "perf_command_server: $server not built" >&2; exit 1; }
mkdir -p "$out"
tok="$out/token"
printf secret >"$tok"
rm -f "$out/server.log"

# shellcheck disable=SC2086  # BENCH_ABX_ARGS is split into flags on purpose
taskset -c 1 "$server" --module "$module" --port 0 --token-file "$tok" --log-level warn \
  ${BENCH_ABX_ARGS:-} >"$out/server.log" 2>&1 &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
trap cleanup EXIT
port=""
for _ in $(seq 100); do
  port="$(sed -n 's/.*listening on [^ ]*:\([0-9]*\).*/\1/p' "$out/server.log" 2>/dev/null || true)"
  [ -n "$port" ] && break
  sleep 0.05
done
[ -n "$port" ] || { echo "perf_command_server: server did not start:" >&2; cat "$out/server.log" >&2; exit 1; }
url="http://127.0.0.1:$port/commands/demo"
export BENCH_TOKEN=secret BENCH_BODY='{"x":42,"y":"world"}'
# Warm up, then measure: wrk and perf over the same window.
taskset -c 0 wrk -t1 -c"$conns" -d1s -s "$here/post_demo.lua" "$url" >/dev/null
taskset -c 0 wrk -t1 -c"$conns" -d"${secs}s" -s "$here/post_demo.lua" "$url" >"$out/wrk.txt" &
wrk_pid=$!
sleep 0.3
perf stat -e task-clock,context-switches,cycles,instructions -p "$pid" -o "$out/stat.txt" -- \
  sleep "$((secs - 1))" &
stat_pid=$!
perf record -F 1999 -p "$pid" -o "$out/perf.data" -- sleep "$((secs - 1))" 2>"$out/record.log"
wait "$stat_pid" "$wrk_pid"
rps="$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' "$out/wrk.txt")"
clock_ms="$(awk '/task-clock/ {gsub(",", "", $1); print $1}' "$out/stat.txt")"
echo "wrk: $rps calls/s at $conns connections; server task-clock over $((secs - 1)) s: $clock_ms ms"
awk -v r="$rps" -v c="$clock_ms" -v s="$((secs - 1))" \
  'BEGIN { printf "server CPU per call: %.2f us (perf stat, while perf record samples too)\n", c * 1000 / (r * s) }'
cat "$out/stat.txt"
perf report -i "$out/perf.data" --no-children --sort dso --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | head -15
perf report -i "$out/perf.data" --no-children --sort dso,sym --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | head -"${BENCH_PERF_TOP:-60}"

#!/usr/bin/env bash
# Python vs C++ commands through abx-server (issue 37): the Python `demo` (abx-server --python,
# docs/python.md) against the demo module's C++ `demo` (same signature, same answer), POST
# /commands/demo with wrk at 1 connection (p50 latency) and 16 connections (calls/s), the two
# servers' runs alternated, and the ratios Python / C++. Each server and its worker is pinned to
# CPU 1 and wrk to CPU 0 when the machine has two CPUs or more (as bench/command_server.sh).
# Aims (issue 37): p50 at 1 connection <= 1.5x C++'s; calls/s at 16 connections >= 0.5x C++'s.
# Usage: bench/python_commands.sh [--no-build] [--build-dir DIR] [--duration S] [--rounds N]
#   --build-dir  where abx-server and the demo module are (default build/release, which is
#                built first with the release preset unless --no-build)
# Not a test: never run from .ci/run.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=/dev/null
. "$here/lib/load.sh"  # bench_row
root="$(dirname "$here")"
cd "$root"

build=1; dir=build/release; duration=5; rounds=2
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    --build-dir) dir="$2"; shift ;;
    --duration) duration="$2"; shift ;;
    --rounds) rounds="$2"; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "[bench] python_commands: ignoring $1 (bench/run.sh passes every bench's options)" >&2 ;;
  esac
  shift
done
command -v wrk >/dev/null || { echo "bench: wrk missing (scripts/install-deps.sh)" >&2; exit 1; }
mkdir -p bench/out
if [ "$build" = 1 ]; then
  echo "[bench] building abx-server and the demo module (release preset); log: bench/out/build.log" >&2
  cmake --preset release >bench/out/build.log 2>&1
  cmake --build build/release --target abx-server abx_demo_commands >>bench/out/build.log 2>&1
fi
server="$dir/src/server/abx-server"
module="$dir/examples/commands/libabx_demo_commands.so"
[ -x "$server" ] && [ -f "$module" ] || { echo "bench: no $server / $module" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/abx-bench-py.XXXXXX")"
pids=()
cleanup() {
  for p in "${pids[@]+"${pids[@]}"}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cat >"$work/tools.py" <<'PY'
from abx import sandbox


@sandbox.register
def demo(x: int, y: str = "hello") -> str:
    """Run a demo command."""
    return f"{x}: {y}"
PY

pin_server=(); pin_client=()
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
  pin_server=(taskset -c 1); pin_client=(taskset -c 0)
fi
export ABX_ACCESS_TOKEN=bench-token-0123456789 BENCH_TOKEN=bench-token-0123456789
start() {  # name, then abx-server's module flags; sets port_<name>
  local name="$1"; shift
  "${pin_server[@]+"${pin_server[@]}"}" "$server" "$@" --port 0 --log-level warn \
    >"$work/$name.out" 2>"$work/$name.err" &
  pids+=($!)
  local p=""
  for _ in $(seq 100); do
    p=$(sed -n 's/^listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$work/$name.out")
    [ -n "$p" ] && break
    sleep 0.1
  done
  [ -n "$p" ] || { cat "$work/$name.err" >&2; echo "bench: $name did not start" >&2; exit 1; }
  eval "port_$name=$p"
}
start cxx --module "$module"
start py --python "$work/tools.py"
for n in cxx py; do
  p="port_$n"
  got=$(curl -s -X POST -H "X-Access-Token: $BENCH_TOKEN" -H 'Content-Type: application/json' \
    -d '{"x":42,"y":"world"}' "http://127.0.0.1:${!p}/commands/demo")
  [ "$got" = '{"result":"42: world"}' ] || { echo "bench: $n answered '$got'" >&2; exit 1; }
done

# One wrk run: prints "p50_us calls_per_s errors".
measure() {
  local port="$1" conns="$2"
  "${pin_client[@]+"${pin_client[@]}"}" wrk -t1 -c"$conns" -d"${duration}s" --latency \
    -s "$here/lib/post_demo.lua" "http://127.0.0.1:$port/commands/demo" >"$work/wrk.out" 2>&1
  python3 - "$work/wrk.out" <<'PY'
import json, re, sys
m = re.search(r"^WRKJSON (.*)$", open(sys.argv[1]).read(), re.M)
d = json.loads(m.group(1))
errors = sum(d["errors"].values())
print(d["latency_us"]["p50"], round(d["requests"] / (d["duration_us"] / 1e6)), errors)
PY
}

echo "# abx-server: Python demo (--python) vs C++ demo (--module), POST /commands/demo"
echo "# $server; ${duration}s per run, $rounds round(s), runs alternated; $(date -u +%FT%TZ); load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %-5s %-6s %12s %12s %7s\n' round conns server p50_us calls_per_s errors
declare -A p50 rate
for r in $(seq "$rounds"); do
  for c in 1 16; do
    for n in cxx py; do
      p="port_$n"
      read -r lat cps err < <(measure "${!p}" "$c")
      printf '%-6s %-5s %-6s %12s %12s %7s\n' "$r" "$c" "$n" "$lat" "$cps" "$err"
      p50[$n.$c]="${p50[$n.$c]:-} $lat"
      rate[$n.$c]="${rate[$n.$c]:-} $cps"
    done
  done
done
python3 - "${p50[cxx.1]}" "${p50[py.1]}" "${rate[cxx.16]}" "${rate[py.16]}" <<'PY'
import statistics as st, sys
c1, p1, c16, p16 = ([float(x) for x in a.split()] for a in sys.argv[1:5])
lat = st.median(p1) / st.median(c1)
thr = st.median(p16) / st.median(c16)
print(f"p50 @1 connection: python {st.median(p1):.0f} us, C++ {st.median(c1):.0f} us -> "
      f"ratio {lat:.2f}x (aim <= 1.5x: {'met' if lat <= 1.5 else 'NOT met'})")
print(f"calls/s @16 connections: python {st.median(p16):.0f}, C++ {st.median(c16):.0f} -> "
      f"ratio {thr:.2f}x (aim >= 0.5x: {'met' if thr >= 0.5 else 'NOT met'})")
PY
# The summary table's rows (run.sh): medians over the rounds. Its ratio is how many times better
# abx's row is, so "p50 <= 1.5x C++'s" is ">=0.666x" and "calls/s >= 0.5x" is ">=0.5x".
median() { tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
bench_row python_commands "POST /commands/demo p50 at 1 connection, Python command" \
  "$(median <<<"${p50[py.1]}")" "C++ command (--module)" "$(median <<<"${p50[cxx.1]}")" us lower ">=0.666x"
bench_row python_commands "POST /commands/demo calls/s at 16 connections, Python command" \
  "$(median <<<"${rate[py.16]}")" "C++ command (--module)" "$(median <<<"${rate[cxx.16]}")" "calls/s" higher ">=0.5x"

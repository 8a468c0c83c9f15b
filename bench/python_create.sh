#!/usr/bin/env bash
# A sandbox serving a Python module, create -> first call answered (issue 37): two templates
# built FROM base through a real abxd (its own temp home, port 0, --dns-upstream 127.0.0.1:9),
# one serving the C++ demo module (abx-server --module, as the built-in `demo` template does),
# one serving a Python module with the same `demo(x: int, y: str = "hello") -> str`
# (server: {python: ...}). Then N rounds, C++ and Python alternated (the order swapped every
# round): POST /sandboxes, POST /commands/demo through abxd's proxy until the first 200
# (retried every 2 ms), DELETE. p50/p95 of each and the ratio Python / C++ of the p50s.
# Aim (issue 37): Python's p50 <= 1.5x C++'s. Needs root and the base image in the image store
# ($ABX_IMAGE_STORE, default build/images; the build adds layers to it, it gcs nothing).
# Usage: bench/python_create.sh [--rounds N] [--warmup N] [--build-dir DIR] [--wait-idle S]
#                               [--abxd-arg FLAG]... [--pause-ms MS]
#   --build-dir  where abxd and abx are (default build/release, else build/dev; no build step)
#   --abxd-arg   an extra flag for abxd (repeatable; e.g. --abxd-arg=--sandbox-pool=2)
#   --pause-ms   each create comes this long after the last DELETE (default 0: back to back)
# Not a test: never run from .ci/run.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=/dev/null
. "$here/lib/load.sh"  # ABX_IMAGE_STORE, bench_start_abxd, bench_row
root="$(dirname "$here")"
cd "$root"

rounds=20; warmup=2; dir=""; wait_idle=${BENCH_WAIT_IDLE:-0}; abxd_args=(); pause_ms=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift ;;
    --warmup) warmup="$2"; shift ;;
    --build-dir) dir="$2"; shift ;;
    --wait-idle) wait_idle="$2"; shift ;;
    --abxd-arg) abxd_args+=("$2"); shift ;;
    --abxd-arg=*) abxd_args+=("${1#--abxd-arg=}") ;;
    --pause-ms) pause_ms="$2"; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "[bench] python_create: ignoring $1 (bench/run.sh passes every bench's options)" >&2 ;;
  esac
  shift
done
if [ -z "$dir" ]; then
  for d in build/release build/dev; do
    [ -x "$d/src/platform/abxd" ] && [ -x "$d/src/cli/abx" ] && { dir=$d; break; }
  done
fi
abxd="$dir/src/platform/abxd"; abx="$dir/src/cli/abx"
[ -x "$abxd" ] && [ -x "$abx" ] || { echo "bench: no abxd/abx in '${dir}' (build them first)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "bench: python_create needs root" >&2; exit 1; }
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$dir/CMakeCache.txt" 2>/dev/null || true)

work="$(mktemp -d "${TMPDIR:-/tmp}/abx-bench-pycreate.XXXXXX")"
chmod 755 "$work"
mkdir -p "$work/home"
cleanup() {
  # abxd runs with --kill-sandboxes: stopping it ends every sandbox it still has.
  bench_stop_abxd
  rm -rf "$work"
}
trap cleanup EXIT

bench_wait_idle "$wait_idle"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
bench_start_abxd "$abxd" "$work/home" --log-level warn ${abxd_args[@]+"${abxd_args[@]}"}
export ABX_API_URL="$BENCH_ABXD_URL" ABX_API_KEY="$BENCH_ABXD_KEY" ABX_HOME="$work/client"

# The two contexts: the same layers (FROM base, tools.py copied in); only the server differs.
mkdir -p "$work/cxx" "$work/py"
cat >"$work/py/tools.py" <<'PY'
from abx import sandbox


@sandbox.register
def demo(x: int, y: str = "hello") -> str:
    """Run a demo command."""
    return f"{x}: {y}"
PY
cp "$work/py/tools.py" "$work/cxx/tools.py"
printf 'FROM base\nCOPY tools.py /opt/tools/tools.py\n' >"$work/py/Dockerfile"
cp "$work/py/Dockerfile" "$work/cxx/Dockerfile"
cat >"$work/cxx/template.yaml" <<'YAML'
id: bench-cxx-demo
server:
  command: [/opt/abx/bin/abx-server, --module, /opt/abx/lib/libabx_demo_commands.so, --port, "49982"]
  port: 49982
YAML
cat >"$work/py/template.yaml" <<'YAML'
id: bench-py-demo
server:
  python: /opt/tools/tools.py
YAML
for t in cxx py; do
  "$abx" template build -t "bench-$t-demo" "$work/$t" >"$work/build-$t.log" 2>&1 ||
    { tail -20 "$work/build-$t.log" >&2; echo "bench: template build ($t) failed" >&2; exit 1; }
done

echo "# create -> first POST /commands/demo answered through abxd: C++ module vs Python module"
echo "# $abxd ${abxd_args[*]+${abxd_args[*]}} (${build_type:-unknown} build); pause ${pause_ms} ms; $rounds rounds after $warmup warm-up, alternated;" \
  "$(date -u +%FT%TZ); $(nproc) CPUs; load $load_before"
/usr/bin/python3 "$here/lib/python_create.py" "$BENCH_ABXD_URL" "$BENCH_ABXD_KEY" \
  bench-cxx-demo bench-py-demo "$rounds" "$warmup" "$pause_ms" | tee "$work/run.out"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
summary=$(sed -n 's/^PYCREATE //p' "$work/run.out")
read -r c50 c95 p50 p95 busy < <(python3 -c '
import json, sys
d = json.loads(sys.argv[1])
print(*(f"{v:.1f}" for v in (d["cxx"]["p50"], d["cxx"]["p95"], d["py"]["p50"], d["py"]["p95"])), d["busy_pct"])
' "$summary")
ratio=$(awk -v p="$p50" -v c="$c50" 'BEGIN {printf "%.2f", p / c}')
met=$(awk -v r="$ratio" 'BEGIN {print (r <= 1.5) ? "met" : "NOT met"}')
echo "C++ module:    p50 $c50 ms, p95 $c95 ms"
echo "Python module: p50 $p50 ms, p95 $p95 ms"
echo "ratio Python / C++ (p50): ${ratio}x (aim <= 1.5x: $met)"
python3 -c '
import json, sys
d = json.loads(sys.argv[1])
c, p = d["cxx"]["pooled"], d["py"]["pooled"]
print(f"creates that took a pooled sandbox (abxd --sandbox-pool): C++ {c}, Python {p}")
' "$summary"
python3 -c '
import json, sys
d = json.loads(sys.argv[1])
c, p = d["cxx"].get("steps_ms", {}), d["py"].get("steps_ms", {})
if c or p:
    print("inside abxd, median ms per create step (GET /metrics):   C++     Python")
    for k in list(dict.fromkeys(list(c) + list(p))):
        print(f"  {k:54} {c.get(k, 0):7.2f} {p.get(k, 0):9.2f}")
' "$summary"
echo "load before $load_before, after $load_after; machine busy ${busy}% during the rounds"
[ "${busy%.*}" -lt 50 ] || echo "WARNING: the machine was busy (${busy}% of all CPUs); trust the ratio more than the values"
# run.sh's ratio is how many times better abx's row is, so "<= 1.5x worse" is ">=0.666x".
bench_row python_create "create -> first demo call p50, Python module (${build_type:-?} build)" "$p50" \
  "C++ module (--module)" "$c50" ms lower ">=0.666x"
bench_row python_create "create -> first demo call p95, Python module" "$p95" \
  "C++ module (--module)" "$c95" ms lower

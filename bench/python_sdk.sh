#!/usr/bin/env bash
# The Python SDK (issue 37): starts abxd (temp home, a free loopback port, --kill-sandboxes) and
# runs bench/python_sdk.py with Debian's /usr/bin/python3: abx.sdk's server.call("demo", …) of a
# `demo` sandbox vs files.write + commands.run("python3 -c …") of the same function (p50/p99 and
# the ratio; aim: server.call >= 10x faster at p50). Builds the release preset's abxd first
# (--no-build: don't; --build-dir DIR: use that build). Needs root and the image store
# ($ABX_IMAGE_STORE, default build/images). Exit 3 when the ratio misses the aim.
# Usage: bench/python_sdk.sh [--no-build] [--build-dir DIR] [--calls N] [--old-runs N]
# Not a test: never run from .ci/run or ctest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
. "$here/lib/load.sh"
cd "$root"

build=1
bd=build/release
calls=${BENCH_PY_CALLS:-2000}
old_runs=${BENCH_OLD_RUNS:-50}
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    --build-dir) bd=$2; shift ;;
    --calls) calls=$2; shift ;;
    --old-runs) old_runs=$2; shift ;;
    *) ;;
  esac
  shift
done
[ "$(id -u)" = 0 ] || { echo "python_sdk bench: needs root (abxd)" >&2; exit 1; }
mkdir -p bench/out
if [ "$build" = 1 ]; then
  echo "[bench] building abxd (release preset); log: bench/out/python-sdk-build.log" >&2
  { cmake --preset release && cmake --build --preset release --target abxd; } \
    >bench/out/python-sdk-build.log 2>&1
fi
[ -d "$bd" ] && bd=$(cd "$bd" && pwd)
[ -x "$bd/src/platform/abxd" ] || { echo "python_sdk bench: $bd/src/platform/abxd not built" >&2; exit 1; }
export ABX_IMAGE_STORE="${ABX_IMAGE_STORE:-$root/build/images}"

home=$(mktemp -d /tmp/abx-bench-pysdk.XXXXXX)
trap 'bench_stop_abxd; rm -rf "$home"' EXIT
bench_start_abxd "$bd/src/platform/abxd" "$home" --log-level warn
export ABX_API_URL="$BENCH_ABXD_URL" ABX_API_KEY="$BENCH_ABXD_KEY" ABX_HOME="$home"
unset ABX_ACCESS_KEY_ID ABX_SECRET_ACCESS_KEY ABX_SANDBOX_URL ABX_SERVER_URL E2B_API_KEY

out=bench/out/python-sdk-$(date +%Y%m%d-%H%M%S).txt
echo "python sdk (issue 37): $(nproc) CPUs, not pinned, load $(bench_load); abxd from $bd; $(/usr/bin/python3 --version)" | tee "$out"
set +e
/usr/bin/python3 "$here/python_sdk.py" --calls "$calls" --old-runs "$old_runs" | tee -a "$out"
status=${PIPESTATUS[0]}
set -e
echo "load after: $(bench_load)" | tee -a "$out"
cp "$out" bench/out/python-sdk-latest.txt
exit "$status"

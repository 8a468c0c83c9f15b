#!/usr/bin/env bash
# The SDK path (issue 15): starts abxd (temp home, a free loopback port, --kill-sandboxes) and one
# `demo` sandbox, then runs bench/sdk/sdk_bench against them:
#   libabx server().call("demo", {x: 1}) at 1 and 64 concurrent callers vs a plain Boost.Beast
#   keep-alive client sending the same request through abxd (p50/p99, calls/s); files.write +
#   commands.run of the same work through the same SDK in the same process (p50/p99; aim: the call
#   >= 10x faster at p50); and the abx CLI's start-up to the first byte on stdout (`abx --version`
#   vs /bin/echo, `abx run <id> demo -a x=1` vs curl doing the same POST; aim < 5 ms).
# Builds the release preset's abxd, abx and sdk_bench first (--no-build: don't). Needs root and
# the image store ($ABX_IMAGE_STORE, default build/images). Each row also goes to bench_row.
# Usage: bench/sdk.sh [--no-build] [--build-dir DIR] [--duration S] [--rounds N] [--warmup S]
#                     [--callers L] [--old-runs N] [--cli-runs N] [--wait-idle S]
# Not a test: never run from .ci/run or ctest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
. "$here/lib/load.sh"
cd "$root"

build=1
bd=build/release
duration=${BENCH_DURATION:-5}
warmup=${BENCH_WARMUP:-0.2}
callers=${BENCH_CALLERS:-1,64}
rounds=${BENCH_ROUNDS:-5}
old_runs=${BENCH_OLD_RUNS:-50}
cli_runs=${BENCH_CLI_RUNS:-200}
wait_idle=${BENCH_WAIT_IDLE:-0}
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    --build-dir) bd=$2; shift ;;
    --duration) duration=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --callers) callers=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --old-runs) old_runs=$2; shift ;;
    --cli-runs) cli_runs=$2; shift ;;
    --wait-idle) wait_idle=$2; shift ;;
    *) ;;
  esac
  shift
done
[ "$(id -u)" = 0 ] || { echo "sdk bench: needs root (abxd)" >&2; exit 1; }
mkdir -p bench/out
if [ "$build" = 1 ]; then
  echo "[bench] building abxd abx sdk_bench (release preset); log: bench/out/sdk-build.log" >&2
  { cmake --preset release && cmake --build --preset release --target abxd abx sdk_bench; } \
    >bench/out/sdk-build.log 2>&1
fi
[ -d "$bd" ] && bd=$(cd "$bd" && pwd)
for b in src/platform/abxd src/cli/abx bench/sdk/sdk_bench; do
  [ -x "$bd/$b" ] || { echo "sdk bench: $bd/$b not built" >&2; exit 1; }
done
export ABX_IMAGE_STORE="${ABX_IMAGE_STORE:-$root/build/images}"

home=$(mktemp -d /tmp/abx-bench-sdk.XXXXXX)
trap 'bench_stop_abxd; rm -rf "$home"' EXIT
bench_start_abxd "$bd/src/platform/abxd" "$home" --log-level warn
export ABX_API_URL="$BENCH_ABXD_URL" ABX_API_KEY="$BENCH_ABXD_KEY"
export ABX_HOME="$home"
abx="$bd/src/cli/abx"
id=$("$abx" sandbox create demo)
ready=0
for _ in $(seq 100); do "$abx" run "$id" demo -a x=1 >/dev/null 2>&1 && { ready=1; break; }; sleep 0.05; done
[ "$ready" = 1 ] || { echo "sdk bench: sandbox $id never answered demo" >&2; exit 1; }

bench_wait_idle "$wait_idle"
load0=$(bench_load)
out=bench/out/sdk-$(date +%Y%m%d-%H%M%S).txt
echo "sdk (issue 15): $(nproc) CPUs, not pinned, load $load0; abxd, abx, sdk_bench from $bd" | tee "$out"
set +e
"$bd/bench/sdk/sdk_bench" --sandbox "$id" --callers "$callers" --rounds "$rounds" --duration "$duration" \
  --warmup "$warmup" --old-runs "$old_runs" --abx "$abx" --cli-runs "$cli_runs" \
  2>"$home/rows" | tee -a "$out"
status=${PIPESTATUS[0]}
set -e
echo "load after: $(bench_load)" | tee -a "$out"
cp "$out" bench/out/sdk-latest.txt
# sdk_bench's summary rows ("ROW<tab>" + bench_row's fields) go to bench_row; anything else it
# said on stderr is shown.
while IFS= read -r line; do
  if [ "${line%%$'\t'*}" = ROW ]; then
    IFS=$'\t' read -r _ f1 f2 f3 f4 f5 f6 f7 f8 <<<"$line"
    bench_row "$f1" "$f2" "$f3" "$f4" "$f5" "$f6" "$f7" "$f8"
  else
    printf '%s\n' "$line" >&2
  fi
done <"$home/rows"
exit "$status"

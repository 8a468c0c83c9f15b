#!/usr/bin/env bash
# abx run vs the path it replaced (issue 5): `abx run <id> demo -a x=1` end to end (process start
# to exit) against writing a script with `abx files write` and running it with `abx exec`, both
# against a real abxd and a `demo` sandbox. Prints p50/p99 of each and the ratio (also as bench_row
# rows). Needs root. bench/sdk.sh does the same comparison inside one process through libabx.
# Usage: bench/cli_run.sh [--build-dir DIR] [--runs N]     (not a test; CI never runs it)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/lib/load.sh"
cd "$(dirname "$here")"
bd=build/release
runs=${BENCH_RUNS:-50}
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) bd=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --no-build) shift ;;
    *) shift ;;
  esac
done
[ -x "$bd/src/cli/abx" ] || { echo "[bench] $bd/src/cli/abx not built (cmake --build --preset release --target abx abxd)" >&2; exit 1; }
home=$(mktemp -d /tmp/abx-bench-cli.XXXXXX)
trap 'bench_stop_abxd; rm -rf "$home"' EXIT
bench_start_abxd "$bd/src/platform/abxd" "$home"
export ABX_API_URL="$BENCH_ABXD_URL" ABX_API_KEY="$BENCH_ABXD_KEY"
export ABX_HOME="$home"
abx="$bd/src/cli/abx"
id=$("$abx" sandbox create demo)
for _ in $(seq 100); do "$abx" run "$id" demo -a x=1 >/dev/null 2>&1 && break; sleep 0.05; done
printf 'echo "1: hello"\n' >"$home/script.sh"

ms() { echo $(( ($(date +%s%N) - $1) / 1000 )); }
run_t=(); old_t=()
for _ in $(seq "$runs"); do
  t=$(date +%s%N); "$abx" run "$id" demo -a x=1 >/dev/null; run_t+=("$(ms "$t")")
  t=$(date +%s%N)
  "$abx" files write "$id" /tmp/script.sh "$home/script.sh" >/dev/null
  "$abx" exec "$id" -- sh /tmp/script.sh >/dev/null
  old_t+=("$(ms "$t")")
done
pct() { printf '%s\n' "$@" | sort -n | awk -v p="$P" '{a[NR]=$1} END {i=int(p/100*(NR-1)+0.5)+1; print a[i]}'; }
P=50; r50=$(pct "${run_t[@]}"); o50=$(pct "${old_t[@]}")
P=99; r99=$(pct "${run_t[@]}"); o99=$(pct "${old_t[@]}")
echo "abx run vs files.write + commands.run ($runs runs each, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
printf '%-44s %10s %10s\n' path "p50 us" "p99 us"
printf '%-44s %10d %10d\n' "abx run <id> demo -a x=1" "$r50" "$r99"
printf '%-44s %10d %10d\n' "abx files write + abx exec -- sh script" "$o50" "$o99"
ratio=$(awk -v a="$o50" -v b="$r50" 'BEGIN {printf "%.2f", a/b}')
echo "ratio (old / abx run) at p50: ${ratio}x   aim >= 10x: $(awk -v r="$ratio" 'BEGIN {print (r >= 10 ? "met" : "not met")}')"
bench_row cli "abx run demo p50 (process start to exit)" "$r50" "abx files write + abx exec" "$o50" us lower ">=10x"
bench_row cli "abx run demo p99 (process start to exit)" "$r99" "abx files write + abx exec" "$o99" us lower

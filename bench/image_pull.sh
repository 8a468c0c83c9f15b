#!/usr/bin/env bash
# Image pull benchmark (issues 10, 38): abx's registry pull into a fresh empty store
# (`abxd --image-store DIR image import NAME 127.0.0.1:PORT/bench/pull:1`, which downloads,
# sha256-checks AND extracts every layer, extracting each layer while it downloads, three layers
# at a time) side by side with its two peers alone: `skopeo copy docker://… oci:DIR` (download +
# check, no extraction) and `tar -xzf` of each layer, already on disk, into its own directory
# (extraction alone); and with skopeo copy followed by tar -xzf (the same work as abx, one after
# the other). Debian's docker-registry on a free loopback port serves a generated 5-layer image
# (~200 MB uncompressed, ~140 MB gzip; bench/lib/oci_seed.py). Traffic stays on loopback.
# p50/min per tool and the ratios; the aim (issue 38): abx <= 1.1x the slower of skopeo copy and
# tar alone.
# Usage: bench/image_pull.sh [--runs N] [--abxd PATH] [--build-dir DIR] [--scale F]
#                            [--wait-idle S] [--keep]
#   (other options given to bench/run.sh, e.g. --no-build, are ignored; nothing is built here:
#    build abxd first, e.g. cmake --build --preset release --target abxd)
# Not a test: never run from .ci/run or ctest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
. "$here/lib/load.sh"

runs=${BENCH_RUNS:-5}
abxd=""
bd=""
scale=1.0
wait_idle=${BENCH_WAIT_IDLE:-0}
keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift ;;
    --abxd) abxd=$2; shift ;;
    --build-dir) bd=$2; shift ;;
    --scale) scale=$2; shift ;;
    --wait-idle) wait_idle=$2; shift ;;
    --keep) keep=1 ;;
    *) ;;
  esac
  shift
done
if [ -z "$abxd" ]; then
  for d in ${bd:-build/release build/dev}; do
    [ -x "$root/$d/src/platform/abxd" ] && { abxd="$root/$d/src/platform/abxd"; break; }
  done
fi
[ -n "$abxd" ] && [ -x "$abxd" ] ||
  { echo "[bench] abxd not built (cmake --build --preset release --target abxd, or --abxd PATH)" >&2; exit 1; }
for t in docker-registry skopeo tar curl /usr/bin/python3; do
  command -v "$t" >/dev/null || { echo "[bench] $t missing (scripts/install-deps.sh)" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/abx-bench-pull.XXXXXX")
reg_pid=""
cleanup() {
  if [ -n "$reg_pid" ]; then kill -TERM "$reg_pid" 2>/dev/null || true; wait "$reg_pid" 2>/dev/null || true; fi
  if [ "$keep" = 1 ]; then echo "[bench] kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
mkdir -p "$root/bench/out"
export BENCH_LOG="$work/tools.log"

echo "[bench] generating the seed image (scale $scale)" >&2
read -r nlayers gzbytes rawbytes < <(/usr/bin/python3 "$here/lib/oci_seed.py" "$work/seed" --scale "$scale")

# Debian's docker-registry on a free loopback port (scripts/lib/registry.sh).
. "$root/scripts/lib/registry.sh"
start_test_registry "$work"
port=$reg_port
ref="127.0.0.1:$port/bench/pull:1"
skopeo copy --quiet --dest-tls-verify=false "oci:$work/seed:bench" "docker://$ref"
rm -rf "$work/seed"
export BENCH_SERVER_PIDS=$reg_pid
# The layers on disk once, for the extraction-alone peer.
skopeo copy --quiet --src-tls-verify=false "docker://$ref" "oci:$work/local:bench"

# One run of each tool into a fresh directory; the tools alternate so that noise hits them alike.
run_abx() { "$abxd" --image-store "$1/store" image import bench "$ref"; }
run_skopeo() { skopeo copy --quiet --src-tls-verify=false "docker://$ref" "oci:$1/layout:bench"; }
# tar -xzf of every layer of the layout $1 into $2/rootfs/N.
extract_layout() {
  local m l i=0
  m=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"][7:])' "$1/index.json")
  for l in $(/usr/bin/python3 -c 'import json,sys; print(" ".join(x["digest"][7:] for x in json.load(open(sys.argv[1]))["layers"]))' "$1/blobs/sha256/$m"); do
    i=$((i + 1)); mkdir -p "$2/rootfs/$i"
    tar -xzf "$1/blobs/sha256/$l" -C "$2/rootfs/$i" || return 1
  done
}
run_tar() { extract_layout "$work/local" "$1"; }
run_skopeo_tar() { run_skopeo "$1" && extract_layout "$1/layout" "$1"; }
tools=(abx skopeo tar skopeo_tar)
declare -A ms cpu oth
bench_wait_idle "$wait_idle"
load_before=$(bench_load)
maxoth=0
for r in $(seq "$runs"); do
  for t in "${tools[@]}"; do
    d="$work/run-$t-$r"; mkdir -p "$d"; sync
    bench_timed X "run_$t" "$d" || { echo "[bench] $t failed; log:" >&2; tail -20 "$BENCH_LOG" >&2; exit 1; }
    if [ "$t" = abx ] && [ "$r" = 1 ]; then
      du_store=$(du -sb "$d/store/blobs" "$d/store/layers" | awk '{s+=$1} END {print s}')
    fi
    rm -rf "$d"
    ms[$t]+="$X_ms "; cpu[$t]+="$X_cpu "; oth[$t]+="$X_oth "
    [ "$X_oth" -gt "$maxoth" ] && maxoth=$X_oth
    printf '[bench] run %d %-10s %6d ms  cpu %5.2f s  others %3d%%\n' "$r" "$t" "$X_ms" "$X_cpu" "$X_oth" >&2
  done
done
load_after=$(bench_load)

p50() { bench_pct 50 ${ms[$1]}; }
out="$root/bench/out/image_pull-$(date +%Y%m%d-%H%M%S).txt"
{
  btype=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$(dirname "$abxd")/../../CMakeCache.txt" 2>/dev/null || true)
  echo "image pull: $nlayers layers, $((gzbytes / 1000000)) MB gzip / $((rawbytes / 1000000)) MB tar, loopback docker-registry, $runs runs each"
  echo "abxd: $abxd${btype:+ ($btype)}; skopeo $(skopeo --version | awk '{print $3}'), GNU tar + gzip"
  echo "machine: $BENCH_NCPU CPUs, not pinned, load $load_before -> $load_after, others up to $maxoth% of the machine"
  printf '%-34s %9s %9s %9s %9s %8s\n' tool "p50 ms" "min ms" "max ms" "cpu s" "others"
  for t in "${tools[@]}"; do
    case $t in
      abx) label="abxd image import (pull+extract)" ;;
      skopeo) label="skopeo copy -> oci: (no extract)" ;;
      tar) label="tar -xzf layers (extract alone)" ;;
      skopeo_tar) label="skopeo copy + tar -xzf layers" ;;
    esac
    printf '%-34s %9d %9d %9d %9.2f %7d%%\n' "$label" "$(p50 $t)" "$(bench_min ${ms[$t]})" \
      "$(bench_max ${ms[$t]})" "$(bench_pct 50 ${cpu[$t]})" "$(bench_pct 50 ${oth[$t]})"
  done
  a=$(p50 abx)
  for t in skopeo tar skopeo_tar; do
    awk -v p="$(p50 $t)" -v a="$a" -v t="$t" 'BEGIN { printf "ratio abx/%s at p50: %.2fx\n", t, a / p }'
  done
  awk -v s="$(p50 skopeo)" -v x="$(p50 tar)" -v a="$a" 'BEGIN {
    slow = s > x ? s : x; r = a / slow
    printf "ratio abx/max(skopeo, tar) at p50: %.2fx   aim <= 1.1x: %s\n", r, (r <= 1.1 ? "MET" : "NOT MET") }'
  echo "abx store after one pull: $((du_store / 1000000)) MB (blobs/ + layers/)"
  [ "$maxoth" -ge 10 ] && echo "WARNING: other processes took up to $maxoth% of the machine during a run; rerun with --wait-idle 120"
  true
} | tee "$out"
cp "$out" "$root/bench/out/image_pull-latest.txt"
# bench/run.sh's summary rows: the aim's peer (the slower of download alone and extraction
# alone; the aim: abx <= 1.1x that, i.e. peer/abx >= 0.91) and the equal-work one.
if [ "$(p50 skopeo)" -ge "$(p50 tar)" ]; then slow=skopeo; slow_label="skopeo copy (no extract)"; else slow=tar; slow_label="tar -xzf alone"; fi
bench_row image_pull "pull+extract $((rawbytes / 1000000)) MB image, p50 of $runs" "$(p50 abx)" "$slow_label" "$(p50 $slow)" ms lower ">=0.91x"
bench_row image_pull "pull+extract $((rawbytes / 1000000)) MB image, p50 of $runs" "$(p50 abx)" "skopeo copy + tar -xzf" "$(p50 skopeo_tar)" ms lower

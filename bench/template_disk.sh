#!/usr/bin/env bash
# Template disk benchmark (issue 10): what N templates built FROM base cost on disk. Starts abxd
# with a temp home and a temp image store holding only `base` (imported from the cached rootfs
# tarball, /var/cache/abx/base-*.tar, written by scripts/build-images.sh), builds t1..tN with
# `abx template build` (each Dockerfile: FROM base + COPY of one small unique file), and reports
# `du -sb` of the store's blobs/ + layers/ before and after: bytes per extra template vs the base
# alone (aim: the base is stored once; a template costs its own small layer, not a copy). Then
# rebuilds t1 unchanged (every step CACHED) and checks that nothing new is stored. Needs root.
# Usage: bench/template_disk.sh [--templates N] [--abxd PATH] [--abx PATH] [--build-dir DIR]
#                               [--base-tar PATH] [--wait-idle S] [--keep]
#   (other options given to bench/run.sh, e.g. --no-build, are ignored; nothing is built here:
#    build first, e.g. cmake --build --preset release --target abxd abx)
# Not a test: never run from .ci/run or ctest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
. "$here/lib/load.sh"

count=${BENCH_TEMPLATES:-10}
abxd=""; abx=""; bd=""; base_tar=""
wait_idle=${BENCH_WAIT_IDLE:-0}
keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --templates) count=$2; shift ;;
    --abxd) abxd=$2; shift ;;
    --abx) abx=$2; shift ;;
    --build-dir) bd=$2; shift ;;
    --base-tar) base_tar=$2; shift ;;
    --wait-idle) wait_idle=$2; shift ;;
    --keep) keep=1 ;;
    *) ;;
  esac
  shift
done
for d in ${bd:-build/release build/dev}; do
  [ -z "$abxd" ] && [ -x "$root/$d/src/platform/abxd" ] && abxd="$root/$d/src/platform/abxd"
  [ -z "$abx" ] && [ -x "$root/$d/src/cli/abx" ] && abx="$root/$d/src/cli/abx"
done
[ -n "$abxd" ] && [ -x "$abxd" ] && [ -n "$abx" ] && [ -x "$abx" ] ||
  { echo "[bench] abxd/abx not built (cmake --build --preset release --target abxd abx, or --abxd/--abx)" >&2; exit 1; }
[ -n "$base_tar" ] || base_tar=$(ls -t /var/cache/abx/base-*.tar 2>/dev/null | head -1 || true)
[ -n "$base_tar" ] && [ -f "$base_tar" ] ||
  { echo "[bench] no base rootfs tarball in /var/cache/abx (scripts/build-images.sh, or --base-tar)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/abx-bench-tpl.XXXXXX")
pid=""
cleanup() {
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  if [ "$keep" = 1 ]; then echo "[bench] kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
mkdir -p "$root/bench/out" "$work/home"
store="$work/store"
usage() { du -sb "$store/blobs" "$store/layers" | awk '{s+=$1} END {print s}'; }

echo "[bench] importing base from $base_tar" >&2
"$abxd" --image-store "$store" image import base "rootfs-tar:$base_tar" >"$work/import.log" 2>&1 ||
  { cat "$work/import.log" >&2; exit 1; }
base_bytes=$(usage)

"$abxd" --home "$work/home" --image-store "$store" --listen 127.0.0.1:0 --kill-sandboxes \
  --dns-upstream 127.0.0.1:9 >"$work/abxd.out" 2>"$work/abxd.log" &
pid=$!
for _ in $(seq 200); do grep -q '^listening on' "$work/abxd.out" && break; sleep 0.05; done
grep -q '^listening on' "$work/abxd.out" || { echo "[bench] abxd did not start:" >&2; tail "$work/abxd.log" >&2; exit 1; }
api=(--api-url "http://$(sed -n 's/^listening on //p' "$work/abxd.out")" --api-key "$(cat "$work/home/api_key")")
export BENCH_SERVER_PIDS=$pid BENCH_LOG="$work/build.log"

bench_wait_idle "$wait_idle"
load_before=$(bench_load)
times=(); maxoth=0
for i in $(seq "$count"); do
  ctx="$work/ctx/t$i"; mkdir -p "$ctx"
  printf 'template %d of the disk benchmark\n' "$i" >"$ctx/hello-$i.txt"
  printf 'FROM base\nCOPY hello-%d.txt /opt/bench/hello-%d.txt\n' "$i" "$i" >"$ctx/Dockerfile"
  bench_timed X "$abx" "${api[@]}" template build -t "t$i" "$ctx" ||
    { echo "[bench] build of t$i failed:" >&2; tail -20 "$BENCH_LOG" >&2; exit 1; }
  times+=("$X_ms"); [ "$X_oth" -gt "$maxoth" ] && maxoth=$X_oth
  printf '[bench] t%-3d built in %6d ms  others %3d%%\n' "$i" "$X_ms" "$X_oth" >&2
done
after_bytes=$(usage)
BENCH_LOG="$work/rebuild.log" bench_timed R "$abx" "${api[@]}" template build -t t1 "$work/ctx/t1" ||
  { echo "[bench] rebuild of t1 failed:" >&2; tail -20 "$work/rebuild.log" >&2; exit 1; }
cached=$(grep -c CACHED "$work/rebuild.log" || true)
steps=$(grep -c . "$work/rebuild.log" || true)
rebuild_bytes=$(usage)
load_after=$(bench_load)
templates_bytes=$(du -sb "$work/home/templates" 2>/dev/null | cut -f1 || echo 0)
btype=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$(dirname "$abxd")/../../CMakeCache.txt" 2>/dev/null || true)

out="$root/bench/out/template_disk-$(date +%Y%m%d-%H%M%S).txt"
{
  echo "template disk: $count templates FROM base (+1 small COPY each), store = du -sb blobs/ + layers/"
  echo "abxd: $abxd${btype:+ ($btype)}; base: $(basename "$base_tar")"
  echo "machine: $BENCH_NCPU CPUs, not pinned, load $load_before -> $load_after, others up to $maxoth% of the machine"
  printf '%-40s %14s\n' "" bytes
  printf '%-40s %14d\n' "store with base only" "$base_bytes"
  printf '%-40s %14d\n' "store after $count templates" "$after_bytes"
  per=$(( (after_bytes - base_bytes) / count ))
  printf '%-40s %14d\n' "per extra template" "$per"
  printf '%-40s %14d\n' "unchanged rebuild of t1 added" "$((rebuild_bytes - after_bytes))"
  printf '%-40s %14d\n' "\$ABX_HOME/templates (metadata)" "$templates_bytes"
  awk -v b="$base_bytes" -v a="$after_bytes" -v p="$per" -v n="$count" 'BEGIN {
    printf "store / base alone: %.4fx (a full copy per template would be %dx)\n", a / b, n + 1
    printf "ratio base/per-template: %.0fx   aim (base stored once, a template << base): %s\n",
      (p > 0 ? b / p : 0), (a < 2 * b ? "MET" : "NOT MET") }'
  echo "build time p50 $(bench_pct 50 "${times[@]}") ms, min $(bench_min "${times[@]}") ms; unchanged rebuild $R_ms ms ($cached of $steps output lines CACHED)"
  [ "$maxoth" -ge 10 ] && echo "WARNING: other processes took up to $maxoth% of the machine during a build (times only; bytes are exact)"
  true
} | tee "$out"
cp "$out" "$root/bench/out/template_disk-latest.txt"
# bench/run.sh's summary rows. The peer of the first is what storing a full copy of the base per
# template would cost (the naive layout), not another tool measured here.
bench_row template_disk "disk per template FROM base (+1 small COPY), $count built" \
  "$(( (after_bytes - base_bytes) / count ))" "a full copy of base" "$base_bytes" bytes lower
bench_row template_disk "disk an unchanged rebuild adds" "$((rebuild_bytes - after_bytes))" - - bytes lower "<=0"

#!/usr/bin/env bash
# Sandbox density and create rate (issue 15), one run, one table (driver: bench/lib/density.py):
#   1. creates per second with 8 concurrent clients: N `POST /sandboxes {"templateID":"base"}`
#      against a real abxd (201 = envd answers inside the sandbox), p50/p99 latency, beside the
#      peers in the same run: `runc run -d` and `crun run -d` of an equivalent bundle (the base
#      image's layers under a fresh overlay, the base template's limits), 8 concurrent too;
#   2. L live idle sandboxes (default 500): memory per sandbox on the host side (growth of a
#      memory cgroup made for abxd: its RSS, the kernel memory and page cache its work allocates)
#      and inside (the sandboxes' own memory cgroups), beside L runc containers measured alike.
# Everything is deleted at the end; the script then checks that no loop device, mount, nft table
# or netns of the run is left. Needs root, abxd built (not built here: build/release, else
# build/dev, or --abxd) and the base image in the store. Run it under the machine's bench lock:
#   flock /tmp/abx-bench.lock bench/density.sh
# Usage: bench/density.sh [--creates N] [--clients C] [--live L] [--settle S] [--peers L]
#                         [--peer-live L] [--abxd PATH] [--abxd-arg FLAG]... [--wait-idle S] [--keep]
# Not a test: never run from .ci/run or ctest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
# shellcheck source=/dev/null
. "$here/lib/load.sh"

creates=${BENCH_CREATES:-200}
clients=${BENCH_CLIENTS:-8}
live=${BENCH_LIVE:-500}
settle=${BENCH_SETTLE:-15}
peers=${BENCH_PEERS:-runc,crun}
peer_live=""
wait_idle=${BENCH_WAIT_IDLE:-0}
abxd=""
py_args=()
keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --creates) creates=$2; shift ;;
    --clients) clients=$2; shift ;;
    --live) live=$2; shift ;;
    --settle) settle=$2; shift ;;
    --peers) peers=$2; shift ;;
    --peer-live) peer_live=$2; shift ;;
    --abxd) abxd=$2; shift ;;
    --abxd-arg) py_args+=("--abxd-arg=$2"); shift ;;
    --wait-idle) wait_idle=$2; shift ;;
    --hold) py_args+=("--hold=$2"); shift ;;
    --keep) keep=1 ;;
    *) ;;
  esac
  shift
done
for d in build/release build/dev; do
  [ -z "$abxd" ] && [ -x "$root/$d/src/platform/abxd" ] && abxd="$root/$d/src/platform/abxd"
done
[ -n "$abxd" ] || { echo "density bench: build abxd first (cmake --build --preset release --target abxd abx_bundle)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "density bench: needs root" >&2; exit 1; }
store="${ABX_IMAGE_STORE:-$root/build/images}"
grep -q '"base"' "$store/refs.json" 2>/dev/null ||
  { echo "density bench: no base image in $store (scripts/build-images.sh)" >&2; exit 1; }

work="$(mktemp -d /tmp/abx-bench-density.XXXXXX)"
chmod 755 "$work"
nft_tables() { nft list tables 2>/dev/null | grep -c ' abx_' || true; }
# Distinct network namespaces of all processes (sandboxes' netns live as long as their init).
netns_count() { { find /proc/[0-9]*/ns/net -maxdepth 0 -printf '%l\n' 2>/dev/null || true; } | sort -u | wc -l; }
nft0=$(nft_tables)
cleanup() {
  set +e
  # density.py deletes what it made; this is the check (and the last resort on a crash).
  local left id c
  # A sandbox still alive (abxd died): kill it, unmount its writable layer, drop abxd's nft table
  # (scripts/leaked-sandboxes.sh matches the run by $work in the sandbox's mount table), then
  # remove its cgroups, which a dead abxd cannot.
  if ! "$root/scripts/leaked-sandboxes.sh" "$work" >"$work/leaked.txt" 2>&1; then
    echo "[bench] LEFT BEHIND by abxd (now killed): $(grep -c '^leaked' "$work/leaked.txt") sandboxes/layers" >&2
    sleep 1
    for id in $(sed -n 's/^leaked sandbox: pid [0-9]* id \([a-z0-9]*\) .*/\1/p' "$work/leaked.txt"); do
      for c in /sys/fs/cgroup/*/abx/"$id" /sys/fs/cgroup/abx/"$id"; do [ -d "$c" ] && rmdir "$c"; done
    done
  fi
  # abxd's watchdog (`abxd watchdog --home $work/...`) if abxd died before stopping it.
  for id in $(pgrep -f "abxd watchdog --home $work/" || true); do kill -TERM "$id"; done
  for c in /sys/fs/cgroup/memory/*/*/abx-bench-density-* /sys/fs/cgroup/memory/abx-bench-density-*; do
    [ -d "$c" ] && case "$c" in *"-$$-"*) rmdir "$c" 2>/dev/null ||
      echo "[bench] LEFT BEHIND: memory cgroup $c" >&2 ;; esac
  done
  left=$(losetup -a | grep -c "$work" || true)
  [ "$left" = 0 ] || echo "[bench] LEFT BEHIND: $left loop devices backed by $work" >&2
  left=$(grep -c " $work" /proc/self/mountinfo || true)
  if [ "$left" != 0 ]; then
    echo "[bench] LEFT BEHIND: $left mounts under $work; unmounting" >&2
    grep " $work" /proc/self/mountinfo | awk '{print $5}' | sort -r | xargs -r -n1 umount -l
  fi
  [ "$(nft_tables)" = "$nft0" ] || echo "[bench] nft abx_ tables: $nft0 before, $(nft_tables) after (other abxds run on this machine too)" >&2
  if [ "$keep" = 1 ]; then echo "[bench] kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bench_wait_idle "$wait_idle"
load_before=$(bench_load)
b0=$(bench_busy); i0=$(bench_idle)
netns0=$(netns_count)
report=$(/usr/bin/python3 "$here/lib/density.py" --abxd "$abxd" --store "$store" --work "$work" --tag $$ \
  --creates "$creates" --clients "$clients" --live "$live" --settle "$settle" --peers "$peers" \
  ${peer_live:+--peer-live "$peer_live"} "${py_args[@]+"${py_args[@]}"}")
b1=$(bench_busy); i1=$(bench_idle)
load_after=$(bench_load)
busy=$(awk -v b=$((b1 - b0)) -v i=$((i1 - i0)) 'BEGIN {printf "%.0f", (b + i > 0) ? 100 * b / (b + i) : 0}')

out_dir="$here/out"
mkdir -p "$out_dir"
stamp=$(date +%Y%m%d-%H%M%S)
{
  echo "abxd: $abxd ($(grep -m1 '^CMAKE_BUILD_TYPE' "$(dirname "$(dirname "$(dirname "$abxd")")")/CMakeCache.txt" 2>/dev/null | cut -d= -f2 || echo '?')); store: $store"
  echo "machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), kernel $(uname -r), load $load_before -> $load_after, machine busy (incl. this bench) $busy%"
  echo "$report"
  echo "netns on the machine: $netns0 before the run, $(netns_count) after"
  if awk -v a="$load_before" -v n="$(nproc)" 'BEGIN {exit !(a > n / 2)}'; then
    echo "WARNING: the machine was busy (load $load_before on $(nproc) CPUs): rerun with --wait-idle 120"
  fi
} | tee "$out_dir/density-$stamp.txt"
cp "$out_dir/density-$stamp.txt" "$out_dir/density-latest.txt"

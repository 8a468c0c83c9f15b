#!/usr/bin/env bash
# Sandbox networking benchmark (issue 13), one run, two comparisons:
#   1. create -> ready (POST /sandboxes until 201) with networking (a veth, the ruleset, the
#      resolver) vs without (abxd --no-network): median of N alternating creates; aim <= 1.3x.
#   2. throughput and TCP connect latency to a test host (tests/e2e/network/internet.sh's world,
#      198.18.<i>.10, a blast server from lib/net_probe.py) from inside a sandbox (veth, forward
#      path, NAT, conntrack, the sandbox's rules) vs from the host itself to the same test host;
#      aim >= 0.8x throughput.
# Traffic goes only to the test's own network namespace. Needs root and the base image in
# build/images (scripts/build-images.sh). Not a test: never run from .ci/run or ctest.
# Usage: bench/network.sh [--creates N] [--mib M] [--connects N] [--abxd PATH] [--abx PATH]
#                         [--index I] [--wait-idle S]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
. "$here/lib/load.sh"

creates=${BENCH_CREATES:-10}
mib=${BENCH_MIB:-512}
connects=${BENCH_CONNECTS:-300}
idx=${BENCH_INET_INDEX:-150}
wait_idle=${BENCH_WAIT_IDLE:-0}
abxd=""; abx=""
while [ $# -gt 0 ]; do
  case "$1" in
    --creates) creates=$2; shift ;;
    --mib) mib=$2; shift ;;
    --connects) connects=$2; shift ;;
    --abxd) abxd=$2; shift ;;
    --abx) abx=$2; shift ;;
    --index) idx=$2; shift ;;
    --wait-idle) wait_idle=$2; shift ;;
    *) ;;
  esac
  shift
done
for d in build/release build/dev; do
  [ -z "$abxd" ] && [ -x "$root/$d/src/platform/abxd" ] && abxd="$root/$d/src/platform/abxd"
  [ -z "$abx" ] && [ -x "$root/$d/src/cli/abx" ] && abx="$root/$d/src/cli/abx"
done
[ -n "$abxd" ] && [ -n "$abx" ] || { echo "network bench: build abxd and abx first" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "network bench: needs root" >&2; exit 1; }
store="${ABX_IMAGE_STORE:-$root/build/images}"

work="$(mktemp -d /tmp/abx-bench-net.XXXXXX)"
chmod 755 "$work"
name="bnet$idx"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  "$root/tests/e2e/network/internet.sh" down "$name" "$idx" "$work/inet" || true
  rm -rf "$work"
}
trap cleanup EXIT

eval "$("$root/tests/e2e/network/internet.sh" up "$name" "$idx" "$work/inet")"
cp "$here/lib/net_probe.py" "$work/net_probe.py"
ip netns exec "$name" python3 "$work/net_probe.py" serve "$INET_WEB" 9000 >/dev/null 2>&1 &
pids+=($!)

# start_abxd <var> <home> <flags...>: sets <var> to the API URL. Not in a $(...) subshell, so
# the cleanup trap sees the pid.
start_abxd() {
  local var=$1 home=$2; shift 2
  "$abxd" --home "$home" --listen 127.0.0.1:0 --image-store "$store" --dns-upstream "$INET_DNS" \
    --kill-sandboxes --log-level warn "$@" >"$home.log" 2>&1 &
  pids+=($!)
  local port
  for _ in $(seq 200); do
    port=$(sed -n 's/^listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$home.log" 2>/dev/null | head -1 || true)
    if [ -n "$port" ]; then printf -v "$var" 'http://127.0.0.1:%s' "$port"; return; fi
    sleep 0.1
  done
  echo "network bench: abxd did not start: $(tail -3 "$home.log")" >&2
  exit 1
}
start_abxd net_url "$work/net"
start_abxd off_url "$work/off" --no-network
net_key=$(cat "$work/net/api_key")
off_key=$(cat "$work/off/api_key")

bench_wait_idle "$wait_idle"
load_before=$(bench_load)

# 1. create -> ready, alternating so drift hits both alike.
create_ms() {  # create_ms <url> <key> -> ms, and kills the sandbox
  # curl's own time for the request (connect to the last byte of the 201); the JSON is parsed
  # after it. (Until 2026-12-03 the time also held curl's and a python3's start-up, ~150 ms.)
  local out id
  out=$(curl -sS -w '\n%{time_total}' -H "X-API-KEY: $2" -H 'Content-Type: application/json' \
    -d '{"templateID":"base","timeout":120}' "$1/sandboxes")
  id=$(printf '%s\n' "$out" | head -n 1 |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["sandboxID"])')
  curl -sS -o /dev/null -X DELETE -H "X-API-KEY: $2" "$1/sandboxes/$id"
  printf '%s\n' "$out" | tail -n 1 | awk '{printf "%.1f\n", $1 * 1000}'
}
net_ms=(); off_ms=()
create_ms "$net_url" "$net_key" >/dev/null  # warm both (image, page cache)
create_ms "$off_url" "$off_key" >/dev/null
for _ in $(seq "$creates"); do
  net_ms+=("$(create_ms "$net_url" "$net_key")")
  off_ms+=("$(create_ms "$off_url" "$off_key")")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
net_med=$(median "${net_ms[@]}")
off_med=$(median "${off_ms[@]}")

# 2. throughput and connect latency: host -> test host vs sandbox -> test host.
export ABX_API_URL="$net_url" ABX_API_KEY="$net_key" ABX_HOME="$work/client"
sb=$("$abx" sandbox create base --timeout 10m 2>/dev/null)
"$abx" files write "$sb" /tmp/net_probe.py <"$here/lib/net_probe.py" >/dev/null
in_sb() { "$abx" exec "$sb" -- python3 /tmp/net_probe.py "$@"; }
host_tp=(); sb_tp=(); host_conn=(); sb_conn=()
for _ in 1 2 3; do
  host_tp+=("$(python3 "$here/lib/net_probe.py" throughput "$INET_WEB" 9000 "$mib")")
  sb_tp+=("$(in_sb throughput "$INET_WEB" 9000 "$mib")")
done
host_conn=$(python3 "$here/lib/net_probe.py" connect "$INET_WEB" 9000 "$connects")
sb_conn=$(in_sb connect "$INET_WEB" 9000 "$connects")
"$abx" sandbox kill "$sb" >/dev/null
load_after=$(bench_load)

host_tp_med=$(printf '%s\n' "${host_tp[@]}" | sort -n | sed -n 2p)
sb_tp_med=$(printf '%s\n' "${sb_tp[@]}" | sort -n | sed -n 2p)
echo "network bench: $(nproc) CPUs, load ${load_before} -> ${load_after}"
echo "create->ready (median of $creates): networking ${net_med} ms, --no-network ${off_med} ms," \
  "ratio $(python3 -c "print(f'{$net_med/$off_med:.2f}')")x (aim <= 1.3x)"
echo "throughput (median of 3 x $mib MiB): sandbox ${sb_tp_med} MiB/s, host ${host_tp_med} MiB/s," \
  "ratio $(python3 -c "print(f'{$sb_tp_med/$host_tp_med:.2f}')")x (aim >= 0.8x)"
read -r sb_c50 sb_c90 <<<"$sb_conn"
read -r host_c50 host_c90 <<<"$host_conn"
echo "connect latency ($connects connects, p50/p90 us): sandbox $sb_c50/$sb_c90, host" \
  "$host_c50/$host_c90, p50 ratio $(python3 -c "print(f'{$sb_c50/$host_c50:.2f}')")x"
# bench/run.sh's summary rows; "<= 1.3x slower" is a ratio (how many times better) >= 1/1.3.
bench_row network "create->ready with networking, median of $creates" "$net_med" "abxd --no-network" "$off_med" ms lower ">=0.77x"
bench_row network "throughput sandbox -> test host, median of 3 x $mib MiB" "$sb_tp_med" "host -> test host" "$host_tp_med" MiB/s higher ">=0.8x"
bench_row network "TCP connect to test host, p50 of $connects" "$sb_c50" "host -> test host" "$host_c50" us lower
if awk -v a="$load_before" 'BEGIN {exit !(a > 1.0)}'; then
  echo "WARNING: the machine was busy (load $load_before): numbers are not comparable"
fi

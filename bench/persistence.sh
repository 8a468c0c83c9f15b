#!/usr/bin/env bash
# Persistence benchmark (issue 14), one run, one table:
#   1. pause (sbx.pause(): the REST call returns once the CRIU checkpoint is committed) and
#      resume (Sandbox.connect(id), and connect until the first envd call answers) of a `base`
#      sandbox whose python3 process holds ~50 and ~500 MiB of touched memory;
#   2. sbx.createSnapshot() and Sandbox.create(snapshotId);
#   3. sbx.fork({count: 10});
#   4. the peer in the same run: Debian's runc checkpoint / restore -d of a container running the
#      same python3 holder on the base image's layer (overlayfs), with the same CRIU binary;
# beside the published figures (E2B, CubeSandbox). Driven by the official e2b JS SDK
# (bench/lib/persistence.mjs). Everything stays on loopback: abxd on 127.0.0.1:0, the sandboxes'
# resolver forwards to 127.0.0.1:9, the runc container has its own empty network namespace.
# Needs root, abxd built (not built here), the base image in the store and tests/e2e/js's
# node_modules (cd tests/e2e/js && npm ci). Not a test: never run from .ci/run or ctest.
# Usage: bench/persistence.sh [--runs N] [--sizes L] [--forks N] [--fork-runs N] [--abxd PATH]
#                             [--criu PATH] [--no-peer] [--node-modules DIR] [--wait-idle S] [--keep]
#                             [--log-level L]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
# shellcheck source=/dev/null
. "$here/lib/load.sh"

runs=${BENCH_RUNS:-5}
sizes=${BENCH_SIZES:-50,500}
forks=${BENCH_FORKS:-10}
fork_runs=${BENCH_FORK_RUNS:-1}
wait_idle=${BENCH_WAIT_IDLE:-0}
log_level=${BENCH_LOG_LEVEL:-warn}
abxd=$root/build/dev/src/platform/abxd
criu=${ABX_CRIU:-/usr/local/lib/abx/criu/criu}
node_modules=${ABX_NODE_MODULES:-$root/tests/e2e/js/node_modules}
peer=1
keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift ;;
    --sizes) sizes=$2; shift ;;
    --forks) forks=$2; shift ;;
    --fork-runs) fork_runs=$2; shift ;;
    --abxd) abxd=$2; shift ;;
    --criu) criu=$2; shift ;;
    --node-modules) node_modules=$2; shift ;;
    --no-peer) peer=0 ;;
    --wait-idle) wait_idle=$2; shift ;;
    --keep) keep=1 ;;
    --log-level) log_level=$2; shift ;;
    *) ;;
  esac
  shift
done
[ "$(id -u)" = 0 ] || { echo "persistence bench: needs root" >&2; exit 1; }
[ -x "$abxd" ] || { echo "persistence bench: $abxd not built (cmake --build --preset dev --target abxd abx_bundle; or --abxd)" >&2; exit 1; }
[ -x "$criu" ] || { echo "persistence bench: no CRIU at $criu (scripts/install-criu.sh)" >&2; exit 1; }
[ -d "$node_modules/e2b" ] || { echo "persistence bench: $node_modules/e2b missing (cd tests/e2e/js && npm ci, or --node-modules)" >&2; exit 1; }
store="${ABX_IMAGE_STORE:-$root/build/images}"
export ABX_IMAGE_STORE="$store"

# The one program that holds the memory, in the sandbox and in the runc container alike: bytes
# repetition writes every page; the pid goes to /tmp/ready once all of it is resident.
holder_py="import os, time
b = b'x' * (MIB << 20)
open('/tmp/ready', 'w').write(str(os.getpid()))
time.sleep(1e9)"

work="$(mktemp -d /tmp/abx-bench-persist.XXXXXX)"
chmod 755 "$work"
rstate="$work/runc-state"
cleanup() {
  set +e
  local c
  for c in $(runc --root "$rstate" list -q 2>/dev/null); do
    runc --root "$rstate" kill "$c" KILL 2>/dev/null
    runc --root "$rstate" delete --force "$c" 2>/dev/null
  done
  for c in "$work"/runc-*/bundle/rootfs; do mountpoint -q "$c" && umount "$c"; done
  # --kill-sandboxes: SIGTERM kills every sandbox of this home (paused ones keep a checkpoint,
  # which goes with the home).
  bench_stop_abxd
  if [ "$keep" = 1 ]; then echo "[bench] kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# The peer: runc checkpoint / restore -d with the same CRIU and the same holder. Writes
# "<size> pause|resume <ms>" lines (or "unavailable <why>") to $work/peer.txt.
runc_peer() {
  local out="$work/peer.txt" layer mib dir id pid t i err l
  : >"$out"
  # runc runs criu with its own environment: CRIU's software stop after the parasite, as abx
  # uses it (docs/persistence.md); without it criu waits for ever on a PVM guest.
  local -x CRIU_FAULT=130
  if ! command -v runc >/dev/null; then echo "unavailable runc not installed (scripts/install-deps.sh)" >"$out"; return; fi
  # The base image's single layer, read-only under an overlay: the same files as the sandbox.
  layer=$(python3 - "$store" <<'PY'
import json, os, sys
s = sys.argv[1]
d = json.load(open(os.path.join(s, "refs.json")))["refs"]["base"]
m = json.load(open(os.path.join(s, "blobs", *d.split(":"))))
print(" ".join(os.path.join(s, "layers", *l["digest"].split(":")) for l in m["layers"]))
PY
  ) || { echo "unavailable base image not found in $store" >"$out"; return; }
  # overlayfs: the topmost layer comes first in lowerdir.
  local lower=""
  for l in $layer; do lower="$l${lower:+:$lower}"; done
  echo "note runc $(runc --version | sed -n 's/^runc version //p'), CRIU $("$criu" --version | sed -n 's/^Version: //p'), restore -d return time" >"$out"
  for mib in ${sizes//,/ }; do
    dir="$work/runc-$mib"; id="abx-bench-persist-$$-$mib"
    mkdir -p "$dir/bundle/rootfs" "$dir/upper" "$dir/work"
    mount -t overlay overlay -o "lowerdir=$lower,upperdir=$dir/upper,workdir=$dir/work" "$dir/bundle/rootfs"
    (cd "$dir/bundle" && runc spec)
    python3 - "$dir/bundle/config.json" "${holder_py/MIB/$mib}" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["process"]["terminal"] = False
s["process"]["args"] = ["python3", "-c", sys.argv[2]]
s["process"]["env"] = ["PATH=/usr/local/bin:/usr/bin:/bin"]
s["root"]["readonly"] = False
s["hostname"] = "abx-bench"
json.dump(s, open(sys.argv[1], "w"))
PY
    # The container's stdio is /dev/null (a pipe would hold $(...) open, and CRIU refuses a
    # host file it cannot see); runc's own errors go to --log.
    if ! runc --root "$rstate" --log "$dir/runc.log" run -d --bundle "$dir/bundle" "$id" </dev/null >/dev/null 2>&1; then
      echo "unavailable runc run failed: $(tail -1 "$dir/runc.log")" >"$out"; return
    fi
    for _ in $(seq 600); do [ -s "$dir/upper/tmp/ready" ] && break; sleep 0.05; done
    [ -s "$dir/upper/tmp/ready" ] || { echo "unavailable the holder did not start in the runc container" >"$out"; return; }
    for i in $(seq "$runs"); do
      t=$(date +%s%N)
      if ! err=$(runc --root "$rstate" --criu "$criu" checkpoint --image-path "$dir/img$i" "$id" 2>&1); then
        echo "unavailable runc checkpoint failed: $(echo "$err" | tail -1); $(grep -i error "$dir/img$i/dump.log" | tail -1)" >"$out"; return
      fi
      echo "$mib pause $(ms_since "$t")" >>"$out"
      [ "$i" = 1 ] && echo "$mib image $(du -sm "$dir/img$i" | cut -f1)" >>"$out"
      t=$(date +%s%N)
      if ! runc --root "$rstate" --log "$dir/runc.log" --criu "$criu" restore -d --bundle "$dir/bundle" \
        --image-path "$dir/img$i" "$id" </dev/null >/dev/null 2>&1; then
        echo "unavailable runc restore failed: $(tail -1 "$dir/runc.log"); $(grep -i error "$dir/img$i/restore.log" | tail -1)" >"$out"; return
      fi
      echo "$mib resume $(ms_since "$t")" >>"$out"
      rm -rf "$dir/img$i"
    done
    pid=$(runc --root "$rstate" state "$id" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
    echo "$mib rss $(awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$pid/status")" >>"$out"
    runc --root "$rstate" kill "$id" KILL 2>/dev/null || true
    for _ in $(seq 50); do runc --root "$rstate" delete "$id" 2>/dev/null && break; sleep 0.1; done
    umount "$dir/bundle/rootfs"
  done
}

home="$work/home"
mkdir -p "$home"
bench_start_abxd "$abxd" "$home" --image-store "$store" --pause disk --criu "$criu" --log-level "$log_level"
url=$BENCH_ABXD_URL

# shellcheck source=/dev/null
. "$root/scripts/node-env.sh"
cp "$here/lib/persistence.mjs" "$work/persistence.mjs"
ln -s "$node_modules" "$work/node_modules"

bench_wait_idle "$wait_idle"
load_before=$(bench_load)
b0=$(bench_busy); i0=$(bench_idle)
if [ "$peer" = 1 ]; then runc_peer; else echo "unavailable --no-peer" >"$work/peer.txt"; fi
b1=$(bench_busy); i1=$(bench_idle)
table=$(E2B_API_URL="$url" E2B_SANDBOX_URL="$url" E2B_API_KEY="$(cat "$home/api_key")" \
  BENCH_RUNS="$runs" BENCH_SIZES="$sizes" BENCH_FORK_COUNT="$forks" BENCH_FORK_RUNS="$fork_runs" \
  BENCH_ABX_HOME="$home" BENCH_PEER_FILE="$work/peer.txt" BENCH_HOLDER="python3 -c \"$holder_py\"" \
  node "$work/persistence.mjs") || { echo "$table"; echo "persistence bench: the SDK driver failed; abxd log:" >&2; tail -20 "$home/log" >&2; exit 1; }
b2=$(bench_busy); i2=$(bench_idle)
load_after=$(bench_load)
busy() { awk -v b="$1" -v i="$2" 'BEGIN {printf "%.0f", (b + i > 0) ? 100 * b / (b + i) : 0}'; }

out_dir="$here/out"
mkdir -p "$out_dir"
stamp=$(date +%Y%m%d-%H%M%S)
{
  echo "persistence (issue 14): abxd --pause disk vs runc checkpoint/restore, same CRIU, $runs runs, sizes $sizes MiB"
  echo "abxd: $abxd; criu: $criu"
  echo "machine: $(nproc) CPUs, not pinned, load $load_before -> $load_after, machine busy (incl. this bench)" \
    "$(busy $((b1 - b0)) $((i1 - i0)))% during the peer, $(busy $((b2 - b1)) $((i2 - i1)))% during abx"
  echo "$table"
  (grep -E '^[0-9]+ (rss|image) ' "$work/peer.txt" || true) | awk '{printf "runc peer at %s MiB: %s %s MiB\n", $1, $2, $3}'
  echo "published: E2B pause ~4 s per GiB, resume ~1 s; CubeSandbox snapshot 46 ms (7 MB dirty), resume 42 ms, clone 220 ms (96-core machine)"
  if awk -v a="$load_before" -v n="$(nproc)" 'BEGIN {exit !(a > n / 2)}'; then
    echo "WARNING: the machine was busy (load $load_before on $(nproc) CPUs): rerun with --wait-idle 120"
  fi
} | tee "$out_dir/persistence-$stamp.txt"
cp "$out_dir/persistence-$stamp.txt" "$out_dir/persistence-latest.txt"

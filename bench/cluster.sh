#!/usr/bin/env bash
# abxd --cluster benchmark (issue 43), one run, one table (bench/lib/cluster.py):
#   1. a create sent to a front node that places it on another node vs the same create sent to
#      that node (aim: <= 1.3x);
#   2. envd's Process/Start of `echo hi` relayed one hop by another node vs through the owner's
#      proxy vs direct in the sandbox's netns (aim: the hop adds <= 1.2x what the proxy adds);
#      beside them, in the same turns, the same on a second cluster whose nodes use mutual TLS
#      (what TLS adds to the hop; no aim);
#   3. GET /v2/sandboxes and /sandboxes through a front node with 1000 placement records written
#      into etcd vs none (aim: <= 5 ms added).
# One etcd member (Debian's etcd-server) and two abxd nodes, all on 127.0.0.1, started here (and a
# second member with two mutual-TLS nodes, certificates by scripts/cluster-certs.sh); every
# abxd with --dns-upstream 127.0.0.1:9. Needs root, abxd built (not built here; the dev build by
# default) and the base image in the store. Not a test: never run from .ci/run or ctest.
# Usage: bench/cluster.sh [--creates N] [--calls N] [--lists N] [--records N] [--abxd PATH]
#                         [--wait-idle S] [--keep]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=/dev/null
. "$here/lib/load.sh"  # ABX_IMAGE_STORE
wait_idle=${BENCH_WAIT_IDLE:-0}
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --wait-idle) wait_idle=$2; shift ;;
    --creates | --calls | --lists | --records | --abxd | --etcd) args+=("$1" "$2"); shift ;;
    --keep) args+=("$1") ;;
    *) ;;
  esac
  shift
done
[ "$(id -u)" = 0 ] || { echo "cluster bench: needs root" >&2; exit 1; }
command -v etcd >/dev/null || { echo "cluster bench: no etcd (scripts/install-deps.sh: etcd-server)" >&2; exit 1; }

bench_wait_idle "$wait_idle"
load_before=$(bench_load)
b0=$(bench_busy); i0=$(bench_idle)
table=$(/usr/bin/python3 "$here/lib/cluster.py" "${args[@]}") || { echo "$table"; exit 1; }
b1=$(bench_busy); i1=$(bench_idle)
load_after=$(bench_load)
out_dir="$here/out"
mkdir -p "$out_dir"
stamp=$(date +%Y%m%d-%H%M%S)
{
  echo "cluster (issue 43): abxd --cluster, one etcd member and two nodes on loopback (plus a TLS pair)"
  echo "machine: $(nproc) CPUs, not pinned, load $load_before -> $load_after, machine busy (incl. this bench)" \
    "$(awk -v b=$((b1 - b0)) -v i=$((i1 - i0)) 'BEGIN {printf "%.0f", (b + i > 0) ? 100 * b / (b + i) : 0}')%"
  echo "$table" | grep -v '^json: '
  if awk -v a="$load_before" -v n="$(nproc)" 'BEGIN {exit !(a > n / 2)}'; then
    echo "WARNING: the machine was busy (load $load_before on $(nproc) CPUs): rerun with --wait-idle 120"
  fi
} | tee "$out_dir/cluster-$stamp.txt"
echo "$table" | sed -n 's/^json: //p' >"$out_dir/cluster-$stamp.json"

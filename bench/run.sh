#!/usr/bin/env bash
# Runs every benchmark under bench/ (each bench/<name>.sh) in turn, then prints ONE table of the
# rows they all reported (bench_row in lib/load.sh, row() in lib/rows.py: abx, the peer measured
# in the same run, the ratio and the aim) and writes it as markdown with the date and the machine
# to bench/out/summary-<date>.md (lib/summary.py). Benchmarks are not tests: CI never runs this.
# Options are passed to every bench script; each ignores the ones it does not know (e.g.
# --no-build is common, --runs is sandbox_create's), except run.sh's own:
#   --only a,b   run only these benches (names as in bench/<name>.sh)
# Run it under the machine's bench lock: flock /tmp/abx-bench.lock bench/run.sh
# Usage: bench/run.sh [--only a,b] [--no-build] [...]      (see bench/README.md)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
only=""
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --only) only=$2; shift ;;
    --only=*) only=${1#--only=} ;;
    *) args+=("$1") ;;
  esac
  shift
done
benches=()
for b in "$here"/*.sh; do
  name=$(basename "$b" .sh)
  [ "$name" = run ] && continue
  if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then continue; fi
  benches+=("$name")
done
if [ -n "$only" ]; then
  for n in ${only//,/ }; do
    [ -f "$here/$n.sh" ] || { echo "[bench] --only: no bench/$n.sh" >&2; exit 2; }
  done
fi

BENCH_ROWS=$(mktemp /tmp/abx-bench-rows.XXXXXX)
export BENCH_ROWS
trap 'rm -f "$BENCH_ROWS"' EXIT
load_before=$(cut -d' ' -f1 /proc/loadavg)
# An abxd left running (a test's, an interrupted bench's) keeps its nftables table, whose rules
# then see the benches' traffic too; an idle one passes --wait-idle. Said in the summary.
stray=$( { pgrep -x abxd | sed 's/^/abxd pid /'
           nft list tables 2>/dev/null | awk '$3 ~ /^abx_/ {print "nftables table " $3}'; } |
         paste -sd, -)
[ -z "$stray" ] || echo "[bench] WARNING: not a clean machine: $stray" >&2
# Steal and total time of all CPUs from /proc/stat's first line (user nice system idle iowait
# irq softirq steal): on a VM, the share of its vCPUs' time the hypervisor gave to others, which
# slows every row of a bench, peers included. Said per bench in the summary ("n/a" under one
# CPU-second: too short to tell).
cpu_times() { awk '/^cpu / {print $9, $2+$3+$4+$5+$6+$7+$8+$9; exit}' /proc/stat; }
status=0
failed=()
steal=()
for name in "${benches[@]}"; do
  echo "=== $name ===" >&2
  read -r s0 t0 < <(cpu_times)
  bash "$here/$name.sh" "${args[@]+"${args[@]}"}" || {
    rc=$?; status=$rc; failed+=("$name"); echo "[bench] $name.sh FAILED ($rc)" >&2; }
  read -r s1 t1 < <(cpu_times)
  steal+=("$name=$(awk -v s=$((s1 - s0)) -v t=$((t1 - t0)) \
                        'BEGIN { if (t < 100) printf("n/a"); else printf("%.1f", 100 * s / t) }')")
done
ran=$(IFS=,; echo "${benches[*]}")
/usr/bin/python3 "$here/lib/summary.py" "$BENCH_ROWS" "$here/out/summary-$(date -u +%Y%m%d-%H%M%S).md" \
  --ran "$ran" --failed "$(IFS=,; echo "${failed[*]+"${failed[*]}"}")" --only "$only" \
  --load-before "$load_before" --stray "$stray" --steal "$(IFS=,; echo "${steal[*]}")"
exit "$status"

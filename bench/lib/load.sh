# Shared helpers for the shell benchmarks: machine load, CPU taken by other processes, percentiles.
# Source it: . "$here/lib/load.sh". Not a benchmark itself (bench/run.sh only runs bench/*.sh).

BENCH_HZ=$(getconf CLK_TCK)
# The image store every abxd of a bench uses: the one scripts/build-images.sh fills by default.
ABX_IMAGE_STORE=${ABX_IMAGE_STORE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/build/images}
export ABX_IMAGE_STORE
BENCH_NCPU=$(nproc)

# Busy CPU jiffies of the whole machine (user nice system irq softirq steal; guest is inside user).
bench_busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9; exit}' /proc/stat; }
# Idle+iowait jiffies of the whole machine.
bench_idle() { awk '/^cpu /{print $5+$6; exit}' /proc/stat; }
# CPU jiffies (utime+stime, all threads) of the given live pids; dead ones count 0.
bench_pid_cpu() {
  local t=0 p
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] || continue
    t=$((t + $(sed 's/.*) //' "/proc/$p/stat" | awk '{print $12+$13}')))
  done
  echo "$t"
}
bench_load() { cut -d' ' -f1 /proc/loadavg; }

# bench_wait_idle S: wait up to S seconds for the machine to be < 25% busy (1 s samples).
bench_wait_idle() {
  local limit=$1 waited=0 b0 i0 b1 i1
  [ "$limit" -gt 0 ] 2>/dev/null || return 0
  while [ "$waited" -lt "$limit" ]; do
    b0=$(bench_busy); i0=$(bench_idle); sleep 1; b1=$(bench_busy); i1=$(bench_idle)
    waited=$((waited + 1))
    if [ $(( (b1 - b0) * 4 )) -lt $(( (b1 - b0) + (i1 - i0) )) ]; then
      echo "[bench] machine idle after ${waited}s (load $(bench_load))" >&2; return 0
    fi
  done
  echo "[bench] machine still busy after ${limit}s (load $(bench_load)); measuring anyway" >&2
}

# bench_timed OUTVAR CMD...: runs CMD (stdout/stderr to $BENCH_LOG or /dev/null), sets
#   OUTVAR_ms   wall time in ms
#   OUTVAR_cpu  CPU seconds used by CMD's processes once reaped (this shell's cutime+cstime; CMD may be
#               a shell function)
#   OUTVAR_oth  share of the machine (all CPUs, 0-100%) that OTHER processes took during the run:
#               machine busy time minus CMD's CPU minus that of $BENCH_SERVER_PIDS (e.g. the
#               registry the command talks to), divided by wall time x CPU count; /proc/stat
#               counts in 1/CLK_TCK (10 ms) steps, so runs under ~1 s give a coarse figure
# Returns CMD's exit status.
bench_timed() {
  local var=$1; shift
  local b0 b1 s0 s1 t0 t1 rc=0 cpu st c0 c1
  b0=$(bench_busy); s0=$(bench_pid_cpu ${BENCH_SERVER_PIDS:-}); t0=$(date +%s%N)
  read -r -a st <"/proc/$BASHPID/stat"; c0=$((st[15] + st[16]))
  "$@" >>"${BENCH_LOG:-/dev/null}" 2>&1 || rc=$?
  read -r -a st <"/proc/$BASHPID/stat"; c1=$((st[15] + st[16]))
  t1=$(date +%s%N); b1=$(bench_busy); s1=$(bench_pid_cpu ${BENCH_SERVER_PIDS:-})
  cpu=$(awk -v c=$((c1 - c0)) -v hz="$BENCH_HZ" 'BEGIN {printf "%.2f", c / hz}')
  printf -v "${var}_ms" '%d' $(( (t1 - t0) / 1000000 ))
  printf -v "${var}_cpu" '%s' "$cpu"
  printf -v "${var}_oth" '%s' "$(awk -v b=$((b1 - b0)) -v s=$((s1 - s0)) -v c="$cpu" -v hz="$BENCH_HZ" \
    -v w=$((t1 - t0)) -v n="$BENCH_NCPU" 'BEGIN {
      o = (b - s) / hz - c; if (o < 0) o = 0; if (o > w / 1e9 * n) o = w / 1e9 * n; printf "%.0f", 100 * o / (w / 1e9 * n) }')"
  return "$rc"
}

# bench_pct P VALUES...: nearest-rank percentile (P in 0..100) of integer values.
bench_pct() {
  local p=$1; shift
  printf '%s\n' "$@" | sort -n | awk -v p="$p" '{a[NR]=$1} END {i=int(p/100*(NR-1)+0.5)+1; print a[i]}'
}
bench_min() { printf '%s\n' "$@" | sort -n | head -1; }
bench_max() { printf '%s\n' "$@" | sort -n | tail -1; }

# bench_row SECTION ROW ABX PEER PEER_VALUE UNIT BETTER [AIM]: one row of bench/run.sh's summary
# table, appended to $BENCH_ROWS (tab-separated; nothing happens when it is unset, i.e. when a
# bench script runs alone). ABX and PEER_VALUE are numbers in UNIT ("us", "calls/s", "MiB", ...);
# PEER names what ran beside abx in the same run ("-" and PEER_VALUE "-" for none). BETTER is
# "higher" or "lower": run.sh prints the ratio as how many times better (>1) or worse (<1) abx is.
# AIM (optional) is what the issue asks, as text run.sh checks: ">=0.5x" / "<=1x" (the ratio as
# printed), or "<1000" / ">=20" (ABX itself, in UNIT); "-" for none. bench/lib/rows.py is the same
# for the python benches.
bench_row() {
  [ -n "${BENCH_ROWS:-}" ] || return 0
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$7" "${8:--}" >>"$BENCH_ROWS"
}

# bench_start_abxd ABXD HOME [FLAG]...: starts ABXD in the background with HOME as its home, on a
# free loopback port, with --kill-sandboxes (its sandboxes die with it) and --dns-upstream
# 127.0.0.1:9 (no sandbox DNS leaves the machine) before FLAGs; its stdout goes to HOME/out, its
# log to HOME/log. Waits up to 10 s for it to listen, then sets BENCH_ABXD_PID, BENCH_ABXD_URL
# (http://127.0.0.1:PORT) and BENCH_ABXD_KEY; returns 1 with the log's tail if it never did.
# bench_stop_abxd stops it (call it from the script's EXIT trap).
bench_start_abxd() {
  local abxd=$1 home=$2 addr=""
  shift 2
  "$abxd" --home "$home" --listen 127.0.0.1:0 --kill-sandboxes --dns-upstream 127.0.0.1:9 "$@" \
    >"$home/out" 2>"$home/log" &
  BENCH_ABXD_PID=$!
  for _ in $(seq 200); do
    addr=$(sed -n 's/^listening on //p' "$home/out" 2>/dev/null | head -1)
    [ -n "$addr" ] && break
    kill -0 "$BENCH_ABXD_PID" 2>/dev/null || break
    sleep 0.05
  done
  [ -n "$addr" ] || { echo "[bench] abxd did not start: $(tail -3 "$home/log")" >&2; return 1; }
  BENCH_ABXD_URL="http://$addr"
  BENCH_ABXD_KEY=$(cat "$home/api_key")
}

# bench_stop_abxd: SIGTERM to the abxd of bench_start_abxd (SIGKILL after 10 s), then waits for it.
bench_stop_abxd() {
  local pid=${BENCH_ABXD_PID:-}
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  BENCH_ABXD_PID=""
}

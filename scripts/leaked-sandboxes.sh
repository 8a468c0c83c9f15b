#!/usr/bin/env bash
# Lists the sandboxes (and the abx-envd daemons its tests ran on the host) of one test run that
# are still alive, kills them, and exits 1 if there were any (2 for a run id under 8
# characters). Usage: leaked-sandboxes.sh RUN_ID
#
# A sandbox is an abx-envd running as PID 1 of its own pid namespace (the last NSpid field is
# 1). It belongs to the run when the run id appears in its mount table: abxd bind-mounts the
# sandbox's token from <abxd home>/run/<id>/token, and every home of the run has the id in its
# path (abx::testing::TempDir adds $ABX_TEST_RUN_ID; scripts/test.sh points TMPDIR at a
# directory named after the run for the SDK tests' own homes). The mount table keeps the path
# even after the home is deleted, which is exactly the leak this looks for. Other runs on the
# same machine (other checkouts, other users) are never touched.
set -uo pipefail

run_id=${1:?usage: leaked-sandboxes.sh RUN_ID}
# The id is looked for as a substring of mount tables and paths: a short or common one ("vol")
# matches other runs' sandboxes (a volume's path) and would kill them.
if [ ${#run_id} -lt 8 ] || [[ ! $run_id =~ ^[A-Za-z0-9_./-]+$ ]]; then
  echo "leaked-sandboxes: run id '$run_id' must be at least 8 characters of [A-Za-z0-9_./-]" >&2
  exit 2
fi
found=0
# Each abx-envd: a sandbox's PID 1 (see above), or one a test ran on the host. That one outlives
# its test when the test is killed (ctest's timeout): it and what it started (a `yes` flood of
# EnvdFlood ran on at 100% CPU for hours) are the run's when they carry its ABX_TEST_RUN_ID,
# which every test process inherits.
for status in /proc/[0-9]*/status; do
  dir=${status%/status}
  pid=${dir#/proc/}
  [ "$(cat "$dir/comm" 2>/dev/null)" = abx-envd ] || continue
  nspid=$(awk '/^NSpid:/ {print $NF; n=NF} END {if (n < 3) print "host"}' "$status" 2>/dev/null \
          | head -n1)
  if [ "$nspid" = 1 ]; then
    grep -qF -- "$run_id" "$dir/mountinfo" 2>/dev/null || continue
    id=$({ tr '\0' '\n' < "$dir/environ"; } 2>/dev/null | sed -n 's/^ABX_SANDBOX_ID=//p')
    home=$(awk '$5 == "/run/abx/token" {print $4}' "$dir/mountinfo" 2>/dev/null)
    echo "leaked sandbox: pid $pid id ${id:-?} token ${home:-?} (started $(ps -o lstart= -p "$pid"))"
  else
    # A process may end between the scan and the read: its files vanish (no message for that).
    { tr '\0' '\n' < "$dir/environ"; } 2>/dev/null | grep -qxF -- "ABX_TEST_RUN_ID=$run_id" || continue
    echo "leaked test abx-envd: pid $pid ($(tr '\0' ' ' < "$dir/cmdline" 2>/dev/null)), started $(ps -o lstart= -p "$pid")"
    pkill -KILL -P "$pid" 2>/dev/null
  fi
  found=$((found + 1))
  kill -KILL "$pid" 2>/dev/null  # a sandbox's pid namespace (everything in it) goes with it
done
# A sandbox's writable layer (an ext4 image on a loop device) is mounted on the host at
# <state>/<id>/rw until destroy() or cleanup_stale(); one of the run still mounted is a leak too.
while read -r mnt; do
  echo "leaked writable layer: $mnt"
  found=$((found + 1))
  umount -l "$mnt" 2>/dev/null  # the loop device detaches itself (autoclear)
done < <(awk -v run="$run_id" '$5 ~ /\/rw$/ && index($5, run) && $0 ~ / - ext4 \/dev\/loop/ {print $5}' \
           /proc/self/mountinfo)
# A restore cut short (its owner killed while CRIU ran) leaves the root and binds it staged for
# CRIU mounted under /run/abx/restore/<id>/, outside every home; the root overlay's options name
# the run's home. cleanup_stale() removes them through the state dir; one still there is a leak.
while read -r mnt; do
  echo "leaked restore stage: $mnt"
  found=$((found + 1))
  umount -l "$mnt" 2>/dev/null
done < <(awk -v run="$run_id" 'index($5, "/run/abx/restore/") == 1 && index($0, run) {print $5}' \
           /proc/self/mountinfo)
# Last, the loop devices: each writable layer's detaches itself once its last mount is gone (a
# little later: give it 5 s). One still backed by a file of the run is held by a leaked mount.
loops=""
for _ in $(seq 50); do
  loops=$(grep -lF -- "$run_id" /sys/block/loop*/loop/backing_file 2>/dev/null || true)
  [ -z "$loops" ] && break
  sleep 0.1
done
for f in $loops; do
  dev=/dev/$(basename "$(dirname "$(dirname "$f")")")
  echo "leaked loop device: $dev backed by $(cat "$f" 2>/dev/null)"
  found=$((found + 1))
  losetup -d "$dev" 2>/dev/null
done
# Each abxd's nftables table (`abx_<hash>`, commented with its home) outlives an abxd that was
# killed rather than stopped; with its sandboxes gone it polices nothing, so it is removed here
# and reported, not counted as a live sandbox.
if command -v nft >/dev/null; then
  for t in $(nft list tables 2>/dev/null | awk '$2 == "inet" && $3 ~ /^abx_/ {print $3}'); do
    # Read the whole listing first: `nft … | grep -q` under pipefail fails when grep exits early
    # and nft dies of SIGPIPE, and such tables were silently kept.
    listing=$(nft list table inet "$t" 2>/dev/null || true)
    if grep -q "comment \".*$run_id" <<<"$listing"; then
      echo "removed the nftables table $t of a stopped abxd of this run"
      nft delete table inet "$t" 2>/dev/null
    fi
  done
fi
if [ "$found" -gt 0 ]; then
  echo "leaked-sandboxes: $found sandbox(es) or test daemon(s) of run $run_id were still alive (now killed)" >&2
  exit 1
fi
echo "leaked-sandboxes: no sandbox of run $run_id is alive"

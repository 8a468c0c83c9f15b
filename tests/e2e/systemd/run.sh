#!/usr/bin/env bash
# The shipped systemd unit, end to end without systemd: `cmake --install --component daemon` into
# a temporary prefix must install abxd, abx, the unit and docs/operations.md; then the unit's own
# ExecStart line (its binary, home, bundle and listener swapped for the test's) must start a
# serving abxd, its ExecReload line must reload the templates, and the stop systemd does with
# KillMode=process (SIGTERM to the main process only) must end it with exit 0.
# ctest passes ABX_BUILD_DIR, ABX_BUNDLE_DIR and ABX_IMAGE_STORE.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
unit="$here/../../../packaging/systemd/abxd.service"
work="$(mktemp -d "${TMPDIR:-/tmp}/abx-systemd.XXXXXX")"
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "systemd unit: $*" >&2; [ -f "$work/abxd.log" ] && cat "$work/abxd.log" >&2; exit 1; }

cmake --install "$ABX_BUILD_DIR" --prefix "$work/prefix" --component daemon >/dev/null
for f in bin/abxd bin/abx lib/systemd/system/abxd.service share/doc/abx/operations.md; do
  [ -e "$work/prefix/$f" ] || fail "cmake --install --component daemon did not install $f"
done
cmp -s "$unit" "$work/prefix/lib/systemd/system/abxd.service" || fail "installed unit differs"

grep -q '^KillMode=process$' "$unit" || fail "KillMode=process is what keeps sandboxes and the watchdog"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
exec_reload=$(sed -n 's/^ExecReload=//p' "$unit")
[ -n "$exec_start" ] && [ -n "$exec_reload" ] || fail "no ExecStart/ExecReload"
case "$exec_start" in
  "/usr/local/bin/abxd --home /var/lib/abx --bundle /opt/abx --listen 127.0.0.1:3000") ;;
  *) fail "ExecStart changed ('$exec_start'): update this test and docs/operations.md" ;;
esac
cmd=${exec_start/\/usr\/local\/bin\/abxd/$work/prefix/bin/abxd}
cmd=${cmd/\/var\/lib\/abx/$work/home}
cmd=${cmd/\/opt\/abx/$ABX_BUNDLE_DIR}
cmd=${cmd/127.0.0.1:3000/127.0.0.1:0}
# shellcheck disable=SC2086  # the unit's line is split into words, as systemd does
$cmd --image-store "$ABX_IMAGE_STORE" >"$work/abxd.log" 2>&1 &
pid=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/abxd.log" 2>/dev/null | head -1 || true)
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || fail "abxd exited at start"
  sleep 0.1
done
[ -n "$port" ] || fail "abxd did not listen"
key=$(cat "$work/home/api_key")
curl -fsS -H "X-API-KEY: $key" "http://127.0.0.1:$port/v2/sandboxes" >/dev/null || fail "API not served"

reload=${exec_reload/\$MAINPID/$pid}
$reload
for _ in $(seq 50); do grep -q "templates reloaded" "$work/abxd.log" && break; sleep 0.1; done
grep -q "templates reloaded" "$work/abxd.log" || fail "ExecReload did not reload the templates"

kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=""
[ "$rc" = 0 ] || fail "abxd exited with $rc on SIGTERM"
echo "systemd unit: installed, started from ExecStart, reloaded by ExecReload, stopped cleanly"

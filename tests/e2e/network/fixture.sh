# The set-up the network e2e scripts share (run.sh, rules.sh, secrets.sh), sourced by each after
# it sets
#   label       the start of its messages ("rules e2e")
#   idx         internet.sh's index (unique among the tests running at once; ctest passes it)
#   name        internet.sh's link name
#   abxd_flags  (an array; optional) what its abxd gets besides the fixture's own flags
# It skips (77) unless root, makes $work (gone at exit, with abxd and the test's internet), brings
# the internet up (internet.sh: its INET_* variables) and defines start_abxd (abxd on the home
# $work/home, again after a kill on a new port; exports ABX_API_URL, ABX_API_KEY and ABX_HOME),
# fail, step, api, abx, sx and scurl. A script's fail_details, if it defines one, prints more
# on a failure. ctest passes ABXD_BIN, ABX_CLI_BIN and ABX_IMAGE_STORE.
if [ "$(id -u)" != 0 ]; then echo "$label: needs root; skipped" >&2; exit 77; fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/abx-$name-e2e.XXXXXX")"
abxd_pid=""
cleanup() {
  if [ -n "$abxd_pid" ]; then kill -TERM "$abxd_pid" 2>/dev/null && wait "$abxd_pid" 2>/dev/null; fi
  "$here/internet.sh" down "$name" "$idx" "$work/inet" || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "$label: FAIL: $*" >&2
  [ -f "$work/abxd.log" ] && { tail -30 "$work/abxd.log"; } >&2
  if declare -F fail_details >/dev/null; then fail_details >&2 || true; fi
  exit 1
}
step() { echo "$label: $*"; }

out=$("$here/internet.sh" up "$name" "$idx" "$work/inet") || fail "internet.sh up"
eval "$out"

start_abxd() {
  local before
  before=$(grep -c "listening on" "$work/abxd.log" 2>/dev/null || true)
  "$ABXD_BIN" --home "$work/home" --listen 127.0.0.1:0 --image-store "$ABX_IMAGE_STORE" \
    --dns-upstream "$INET_DNS" --kill-sandboxes --log-level debug ${abxd_flags[@]+"${abxd_flags[@]}"} \
    >>"$work/abxd.log" 2>&1 &
  abxd_pid=$!
  port=""
  for _ in $(seq 200); do
    if [ "$(grep -c "listening on" "$work/abxd.log" 2>/dev/null || true)" -gt "${before:-0}" ]; then
      port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/abxd.log" | tail -1)
      break
    fi
    kill -0 "$abxd_pid" 2>/dev/null || fail "abxd exited at start"
    sleep 0.1
  done
  [ -n "$port" ] || fail "abxd did not listen"
  export ABX_API_URL="http://127.0.0.1:$port"
  export ABX_API_KEY="$(cat "$work/home/api_key")"
  export ABX_HOME="$work/client"
}
api() { curl -sS -o "$work/body" -w '%{http_code}' -H "X-API-KEY: $ABX_API_KEY" "$@"; }
abx() { "$ABX_CLI_BIN" "$@"; }
# `sx <id> <shell command>`: its output; never fails the script by itself.
sx() { local id=$1; shift; abx exec "$id" -- sh -c "$*" 2>&1 || true; }
# curl from inside a sandbox (no --cacert: it must trust abxd's CA by itself); the body, or
# "FAILED <curl's exit code>".
scurl() { local id=$1; shift; sx "$id" "curl -s --max-time 6 $* || echo FAILED \$?"; }

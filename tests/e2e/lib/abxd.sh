# shellcheck shell=bash
# Sourced by the shell e2e tests: one way to start the abxd under test.
#
# start_abxd HOME LOG [FLAG]...: starts $ABXD_BIN with HOME as its home on a free loopback port,
# with --kill-sandboxes (its sandboxes end with it), a test DNS upstream (--dns-upstream
# $ABX_DNS_UPSTREAM, default 127.0.0.1:9: no sandbox look-up leaves the machine), the image
# store $ABX_IMAGE_STORE when set, then FLAGs; stdout and stderr go to LOG. Waits up to 10 s for
# it to listen and sets ABXD_PID and ABXD_PORT, and exports ABX_API_URL and ABX_API_KEY for the
# CLI and SDKs. Returns 1, with the log's tail on stderr, if it exited or never listened.
# stop_abxd: SIGTERM to it (kill -9 after 10 s), then waits; call it from the test's EXIT trap.
start_abxd() {
  : "${ABXD_BIN:?the abxd binary (ctest sets it)}"
  local home=$1 log=$2
  shift 2
  local store=()
  [ -n "${ABX_IMAGE_STORE:-}" ] && store=(--image-store "$ABX_IMAGE_STORE")
  "$ABXD_BIN" --home "$home" --listen 127.0.0.1:0 "${store[@]+"${store[@]}"}" --kill-sandboxes \
    --dns-upstream "${ABX_DNS_UPSTREAM:-127.0.0.1:9}" "$@" >"$log" 2>&1 &
  ABXD_PID=$!
  ABXD_PORT=""
  for _ in $(seq 100); do
    ABXD_PORT=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$log" 2>/dev/null | head -1 || true)
    [ -n "$ABXD_PORT" ] && break
    kill -0 "$ABXD_PID" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$ABXD_PORT" ]; then
    echo "abxd did not listen; its log ends:" >&2
    tail -20 "$log" >&2
    return 1
  fi
  ABX_API_KEY=$(cat "$home/api_key") || return 1
  export ABX_API_URL="http://127.0.0.1:$ABXD_PORT" ABX_API_KEY
}

stop_abxd() {
  [ -n "${ABXD_PID:-}" ] || return 0
  kill -TERM "$ABXD_PID" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$ABXD_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$ABXD_PID" 2>/dev/null || true
  wait "$ABXD_PID" 2>/dev/null || true
  ABXD_PID=""
}

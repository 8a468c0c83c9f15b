#!/usr/bin/env bash
# The README's "Start abxd and point clients at it" as a test (issue 38 item 5): the block's lines
# as written, but for its build and image lines (ctest's build and the run's image store stand for
# them) and its build directory (build/release -> this build). `abx up &` then serves on the fixed
# 127.0.0.1:3000 — in a network namespace this test makes, so the port is its own — the CLI
# creates a sandbox with the key abxd wrote, `eval "$(abx env)"` sets the e2b environment, and
# the official e2b SDK (JS) runs a command in a sandbox through it.
# ctest passes ABX_README, ABX_BUILD_DIR, ABX_IMAGE_STORE and ABX_NODE_DIR.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
js="$here/../js"
if [ "${ABX_QUICKSTART_NETNS:-}" != 1 ]; then
  # Node and the e2b package first, while npm's registry is reachable (as tests/e2e/js/run.sh).
  # shellcheck source=/dev/null
  . "$here/../../../scripts/node-env.sh"
  if [ ! -d "$js/node_modules/e2b" ]; then (cd "$js" && npm ci --no-audit --no-fund); fi
  # Then a namespace of our own: loopback only, nothing routes out of it.
  exec env ABX_QUICKSTART_NETNS=1 unshare --net -- "${BASH_SOURCE[0]}" "$@"
fi
ip link set lo up

work="$(mktemp -d "${TMPDIR:-/tmp}/abx-quickstart.XXXXXX")"
export HOME="$work/home"  # abx up's home (~/.abx) and the CLI's: the test's own
mkdir -p "$HOME"
abx="$ABX_BUILD_DIR/src/cli/abx"
up_pid=""
cleanup() {
  local ids
  ids=$("$abx" --json sandbox list 2>/dev/null | grep -o '"sandboxID": *"[a-z0-9]*"' | grep -o '[a-z0-9]*"$' | tr -d '"' || true)
  for id in $ids; do "$abx" sandbox kill "$id" >/dev/null 2>&1 || true; done
  if [ -n "$up_pid" ]; then kill "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "quickstart: $*" >&2; [ -f "$work/up.log" ] && tail -20 "$work/up.log" >&2; exit 1; }

# The section's sh block.
awk '/^## Start abxd and point clients at it/ {s=1; next} s && /^## / {exit}
     s && /^```sh/ {b=1; next} b && /^```/ {exit} b {print}' "$ABX_README" >"$work/block.sh"
grep -q "abx up &" "$work/block.sh" || fail "no 'abx up &' line in the README's section"
grep -q 'abx env' "$work/block.sh" || fail "no 'abx env' line in the README's section"

# Run it line by line: the build and image lines are ctest's; `abx up &` runs in the background
# (its output kept) and the next line waits until it answers, as a person reading its output does.
# The image store is the run's; abxd's resolver forwards to a port where nothing answers.
export ABX_IMAGE_STORE ABX_DNS_UPSTREAM="${ABX_DNS_UPSTREAM:-127.0.0.1:9}"
while IFS= read -r line; do
  case "$line" in
    cmake\ * | scripts/build-images.sh*) echo "quickstart: (ctest did) $line"; continue ;;
    '#'*) continue ;;
  esac
  line=${line//build\/release\//$ABX_BUILD_DIR/}
  echo "quickstart: \$ $line"
  case "$line" in
    *" up &"*)
      cmd=${line%%&*}
      # shellcheck disable=SC2086
      $cmd >"$work/up.log" 2>&1 &
      up_pid=$!
      for _ in $(seq 200); do
        curl -fsS http://127.0.0.1:3000/health >/dev/null 2>&1 && break
        kill -0 "$up_pid" 2>/dev/null || fail "abx up exited"
        sleep 0.1
      done
      curl -fsS http://127.0.0.1:3000/health >/dev/null || fail "abxd does not answer on 127.0.0.1:3000"
      ;;
    *'eval "$('*) eval "$line" ;;
    *) out=$(eval "$line") || fail "'$line' failed"; echo "$out"; last_out=$out ;;
  esac
done <"$work/block.sh"

# `abx sandbox create base` printed the id of a live sandbox.
[[ "${last_out:-}" =~ ^[a-z0-9]{20}$ ]] || fail "sandbox create printed '${last_out:-}'"
"$abx" sandbox list | grep -q "$last_out" || fail "sandbox $last_out is not listed"
# What abx env exported: all three, for this abxd.
[ "$E2B_API_URL" = "http://127.0.0.1:3000" ] || fail "E2B_API_URL=$E2B_API_URL"
[ -n "${E2B_SANDBOX_URL:-}" ] && [ -n "${E2B_API_KEY:-}" ] || fail "abx env did not set E2B_SANDBOX_URL and E2B_API_KEY"

# The official e2b SDK (installed before the namespace), with nothing but that environment.
cat >"$work/sdk.mjs" <<JS
import { Sandbox } from '$js/node_modules/e2b/dist/index.mjs';
const sbx = await Sandbox.create('base');
try {
  const r = await sbx.commands.run('echo hello from \$(hostname)');
  console.log(r.stdout.trim());
} finally {
  await sbx.kill();
}
JS
got=$(node "$work/sdk.mjs") || fail "the e2b SDK failed"
[[ "$got" == "hello from "* ]] || fail "the e2b SDK's command printed '$got'"
echo "quickstart: abx up on 127.0.0.1:3000, abx sandbox create, abx env and the e2b SDK: ok"

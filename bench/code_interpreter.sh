#!/usr/bin/env bash
# The code interpreter (issue 17): runCode("x+1") on a warm context vs commands.run of the same
# Python through `python3 -c`, and the first runCode of a new sandbox and of a new context (a
# kernel starting), with the official SDKs against a real abxd and `code-interpreter` sandboxes
# (bench/lib/code_interp.mjs). Needs root, the release build and the code-interpreter image.
# Usage: bench/code_interpreter.sh [--build-dir DIR] [--runs N]     (not a test; CI never runs it)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$(dirname "$here")"
bd=build/release
export BENCH_RUNS=${BENCH_RUNS:-50}
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) bd=$2; shift 2 ;;
    --runs) BENCH_RUNS=$2; shift 2 ;;
    *) shift ;;
  esac
done
[ -x "$bd/src/platform/abxd" ] || { echo "[bench] $bd/src/platform/abxd not built (cmake --build --preset release --target abxd abx_bundle)" >&2; exit 1; }
export ABX_IMAGE_STORE=${ABX_IMAGE_STORE:-$PWD/build/images}
scripts/build-images.sh --store "$ABX_IMAGE_STORE" --abxd "$bd/src/platform/abxd" --only code-interpreter >&2
# shellcheck source=/dev/null
. scripts/node-env.sh
(cd tests/e2e/js && { [ -d node_modules/@e2b/code-interpreter ] || npm ci --no-audit --no-fund >&2; })

home=$(mktemp -d /tmp/abx-bench-interp.XXXXXX)
"$bd/src/platform/abxd" --home "$home" --listen 127.0.0.1:0 --kill-sandboxes \
  --dns-upstream 127.0.0.1:9 >"$home/out" 2>"$home/log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$home"' EXIT
for _ in $(seq 200); do grep -q '^listening on' "$home/out" && break; sleep 0.05; done
url="http://$(sed -n 's/^listening on //p' "$home/out")"
export E2B_API_URL="$url" E2B_SANDBOX_URL="$url" E2B_API_KEY=$(cat "$home/api_key")
cp bench/lib/code_interp.mjs tests/e2e/js/.bench-code-interp.mjs
trap 'rm -f tests/e2e/js/.bench-code-interp.mjs; kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$home"' EXIT
echo "($(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
node tests/e2e/js/.bench-code-interp.mjs

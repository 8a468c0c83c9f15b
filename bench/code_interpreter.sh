#!/usr/bin/env bash
# The code interpreter (issue 17): runCode("x+1") on a warm context vs commands.run of the same
# Python through `python3 -c`, and the first runCode of a new sandbox and of a new context (a
# kernel starting), with the official SDKs against a real abxd and `code-interpreter` sandboxes
# (bench/lib/code_interp.mjs). Needs root, the release build and the code-interpreter image.
# Usage: bench/code_interpreter.sh [--build-dir DIR] [--runs N]     (not a test; CI never runs it)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=/dev/null
. "$here/lib/load.sh"
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
trap 'rm -f tests/e2e/js/.bench-code-interp.mjs; bench_stop_abxd; rm -rf "$home"' EXIT
bench_start_abxd "$bd/src/platform/abxd" "$home"
export E2B_API_URL="$BENCH_ABXD_URL" E2B_SANDBOX_URL="$BENCH_ABXD_URL" E2B_API_KEY="$BENCH_ABXD_KEY"
cp bench/lib/code_interp.mjs tests/e2e/js/.bench-code-interp.mjs
echo "($(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
node tests/e2e/js/.bench-code-interp.mjs

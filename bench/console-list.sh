#!/usr/bin/env bash
# The web console's sandbox list with many sandboxes (issue 42: a list of 500 stays smooth):
# scroll frame times, long tasks and action feedback in Debian's chromium with 50 real sandboxes,
# then with 500, in the same run (bench/lib/console_list.mjs, puppeteer-core from tests/e2e/js).
# Needs chromium (scripts/install-deps.sh) and abxd built (release by default); 500 base
# sandboxes take about 2.5 GiB of memory and a couple of minutes to create.
# Usage: bench/console-list.sh [--build-dir DIR] [--sandboxes N]     (not a test; CI never runs it)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=/dev/null
. "$here/lib/load.sh"
cd "$(dirname "$here")"
bd=build/release
export BENCH_MANY=${BENCH_MANY:-500} BENCH_FEW=${BENCH_FEW:-50}
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) bd=$2; shift 2 ;;
    --sandboxes) BENCH_MANY=$2; shift 2 ;;
    *) shift ;;
  esac
done
[ -x "$bd/src/platform/abxd" ] || { echo "[bench] $bd/src/platform/abxd not built (cmake --build --preset release --target abxd)" >&2; exit 1; }
[ -d build/images ] || { echo "[bench] build/images missing (scripts/build-images.sh)" >&2; exit 1; }
# shellcheck source=/dev/null
. scripts/node-env.sh
(cd tests/e2e/js && { [ -d node_modules/puppeteer-core ] || npm ci --no-audit --no-fund >&2; })

work=$(mktemp -d /tmp/abx-bench-console-list.XXXXXX)
trap 'rm -f tests/e2e/js/.bench-console-list.mjs; bench_stop_abxd; rm -rf "$work"' EXIT
mkdir -p "$work/home"
# --kill-sandboxes: every sandbox made here dies with this abxd.
bench_start_abxd "$bd/src/platform/abxd" "$work/home" --image-store build/images
export BENCH_ABXD_URL BENCH_ABXD_KEY
cp bench/lib/console_list.mjs tests/e2e/js/.bench-console-list.mjs
echo "($(nproc) cores, load $(bench_load); abxd: $bd)"
node tests/e2e/js/.bench-console-list.mjs
echo "(load after: $(bench_load))"

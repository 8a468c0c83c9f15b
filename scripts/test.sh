#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test: the `dev` preset (all tests), then the
# `asan` preset (AddressSanitizer + UBSan, unit-labelled tests). Usage: scripts/test.sh [--no-asan]
set -euo pipefail
cd "$(dirname "$0")/.."

asan=1
for a in "$@"; do
  case "$a" in
    --no-asan) asan=0 ;;
    *) echo "test.sh: unknown flag $a" >&2; exit 2 ;;
  esac
done

jobs=$(nproc)
step() { printf '\n==> %s\n' "$*"; }

step "installing dependencies"
scripts/install-deps.sh --no-bench

step "building (dev preset)"
cmake --preset dev
cmake --build --preset dev -j "$jobs"

step "running tests (dev preset)"
ctest --preset dev -j "$jobs" --timeout 300

if [ "$asan" = 1 ]; then
  step "building (asan preset)"
  cmake --preset asan
  cmake --build --preset asan -j "$jobs"
  step "running unit tests under AddressSanitizer + UBSan (asan preset)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --preset asan -j "$jobs" --timeout 600
fi

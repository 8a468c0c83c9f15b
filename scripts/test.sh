#!/usr/bin/env bash
# Installs dependencies, lints, builds, builds the base image once (scripts/build-images.sh into
# build/images, shared by every test), and runs every test: the `dev` preset (all tests), then
# the `asan` preset (AddressSanitizer + UBSan, unit-labelled tests), then builds the `release`
# preset with every target (tests included: -Werror and -O2 find what -O0 does not) without
# running it. After each ctest, no sandbox the run started may still be alive.
# Usage: scripts/test.sh [--no-asan] [--no-release] [--no-lint]
set -euo pipefail
cd "$(dirname "$0")/.."

asan=1
release=1
lint=1
for a in "$@"; do
  case "$a" in
    --no-asan) asan=0 ;;
    --no-release) release=0 ;;
    --no-lint) lint=0 ;;
    *) echo "test.sh: unknown flag $a" >&2; exit 2 ;;
  esac
done

jobs=$(nproc)
step() { printf '\n==> %s\n' "$*"; }

# The run's identity: abx::testing puts ABX_TEST_RUN_ID into every home it makes, and TMPDIR
# (for the tests only) is a directory named after it, so the SDK tests' homes carry it too.
# scripts/leaked-sandboxes.sh finds the sandboxes of this run, and only those, by it.
run_id="abxrun$(date +%s)x$$"
run_tmp=$(mktemp -d "${TMPDIR:-/tmp}/abx-$run_id-XXXXXX")
# Like /tmp: tests that drop to an unprivileged user (uid 1000) make and reach files under it.
chmod 1777 "$run_tmp"
trap 'rm -rf "$run_tmp"' EXIT

# ctest, then the leak check; fails if either did (the check runs even when tests failed).
run_ctest() {
  local rc=0
  # Sandboxes have outbound networking: no test's DNS question may reach a real resolver, so
  # every abxd of the run forwards to a port where nothing answers (discard) unless its test
  # passes --dns-upstream to a DNS server of its own (tests/e2e/network).
  ABX_TEST_RUN_ID=$run_id TMPDIR=$run_tmp ABX_DNS_UPSTREAM=127.0.0.1:9 ctest "$@" || rc=$?
  scripts/leaked-sandboxes.sh "$run_id" || rc=1
  return "$rc"
}

step "installing dependencies"
scripts/install-deps.sh --no-bench

step "building (dev preset)"
cmake --preset dev
cmake --build --preset dev -j "$jobs"

if [ "$lint" = 1 ]; then
  step "lint (clang-format, clang-tidy, syscall placement)"
  scripts/lint.sh --build-dir=build/dev
fi

# The images base and code-interpreter (Debian bookworm from Debian's registry, mmdebstrap; cached
# in /var/cache/abx) go once into build/images, the store every test's abxd shares.
step "building the base and code-interpreter images into build/images (scripts/build-images.sh)"
scripts/build-images.sh --store build/images --abxd build/dev/src/platform/abxd

step "running tests (dev preset)"
run_ctest --preset dev -j "$jobs" --timeout 300

if [ "$asan" = 1 ]; then
  step "building (asan preset)"
  cmake --preset asan
  cmake --build --preset asan -j "$jobs"
  step "running unit tests under AddressSanitizer + UBSan (asan preset)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_ctest --preset asan -j "$jobs" --timeout 600
fi

if [ "$release" = 1 ]; then
  # Every target, tests and benches included: the release flags (-O2, _FORTIFY_SOURCE, -Werror)
  # report what the dev build does not (e.g. an ignored warn_unused_result). Built, not run.
  step "building (release preset, all targets)"
  cmake --preset release
  cmake --build --preset release -j "$jobs"
fi

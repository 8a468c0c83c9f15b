#!/usr/bin/env bash
# Installs dependencies, lints, builds, builds the base image once (scripts/build-images.sh into
# build/images, shared by every test), and runs every test: the `dev` preset (all tests), then
# the `asan` preset (AddressSanitizer + UBSan, unit-labelled tests), the `tsan` preset
# (ThreadSanitizer, the tsan-labelled concurrency-heavy unit tests), then builds the `release`
# preset with every target (tests included: -Werror and -O2 find what -O0 does not) without
# running it. After each ctest, no sandbox the run started may still be alive.
# Usage: scripts/test.sh [--no-asan] [--no-tsan] [--no-release] [--no-lint]
set -euo pipefail
cd "$(dirname "$0")/.."

asan=1
tsan=1
release=1
lint=1
for a in "$@"; do
  case "$a" in
    --no-asan) asan=0 ;;
    --no-tsan) tsan=0 ;;
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
junit_dir=$(mktemp -d "${TMPDIR:-/tmp}/abx-junit-XXXXXX")
trap 'rm -rf "$run_tmp" "$junit_dir"' EXIT

# ctest, then the leak check and the skip check; fails if any did (the checks run even when
# tests failed). The first argument names the run (its junit file).
run_ctest() {
  local rc=0 name=$1
  shift
  # Sandboxes have outbound networking: no test's DNS question may reach a real resolver, so
  # every abxd of the run forwards to a port where nothing answers (discard) unless its test
  # passes --dns-upstream to a DNS server of its own (tests/e2e/network).
  ABX_TEST_RUN_ID=$run_id TMPDIR=$run_tmp ABX_DNS_UPSTREAM=127.0.0.1:9 \
    ctest --output-junit "$junit_dir/$name.xml" "$@" || rc=$?
  scripts/leaked-sandboxes.sh "$run_id" || rc=1
  # A skipped test must be listed in tests/skips.txt with why: the skipped set cannot grow
  # silently (a missing dependency on the CI machine would otherwise pass as green).
  /usr/bin/python3 scripts/check-skips.py "$junit_dir/$name.xml" tests/skips.txt || rc=1
  return "$rc"
}

# cmake --build, and when it fails, what the machine looked like (disk, memory, the kernel's
# last OOM lines), then the same build once more with one job so that the failing step prints
# its own error alone. A real compile error fails again and the run stops; a step that died
# without a word (stop 51's CI: an ASan compile failed with no compiler output) is rebuilt.
build() {
  if cmake --build "$@" -j "$jobs"; then return 0; fi
  echo "test.sh: the build failed; the machine now:" >&2
  df -h . "${TMPDIR:-/tmp}" >&2 || true
  free -m >&2 || true
  dmesg 2>/dev/null | grep -i -E 'out of memory|killed process|oom' | tail -5 >&2 || true
  echo "test.sh: building again with one job to show the failing step's own output" >&2
  cmake --build "$@" -j 1
}

# Free space on the disk of the build tree, in GiB.
free_gib() { df -P -B1G . | awk 'NR == 2 { print $4 }'; }

# A full run from a clean clone writes about 40 GiB (build/dev 6, build/images 3.5 plus the
# image cache, build/asan 17, build/tsan 6, build/release 4). Stop 53's CI failed when the disk
# filled while the code-interpreter image was extracted: say so up front, not as an extraction
# error.
need_gib=20
if [ "$(free_gib)" -lt "$need_gib" ]; then
  echo "test.sh: warning: only $(free_gib) GiB free on $(df -P . | awk 'NR == 2 { print $6 }')," \
    "a full run from a clean clone needs about 40 (it removes a finished sanitizer tree when" \
    "space runs short)" >&2
  df -h . >&2 || true
fi

# After a preset's tests passed, its tree is not needed again in this run: when less than 30 GiB
# is left for what follows, it goes (a clean clone's CI run then peaks near 27 GiB, not 40).
prune_if_short() {
  local free
  free=$(free_gib)
  if [ "$free" -lt 30 ]; then
    echo "test.sh: $free GiB free: removing build/$1 (its tests passed) to make room" >&2
    rm -rf "build/$1"
  fi
}

step "installing dependencies"
scripts/install-deps.sh --no-bench

step "building (dev preset)"
cmake --preset dev
build --preset dev

if [ "$lint" = 1 ]; then
  step "lint (clang-format, clang-tidy, syscall placement)"
  scripts/lint.sh --build-dir=build/dev
fi

# The images base and code-interpreter (Debian bookworm from Debian's registry, mmdebstrap; cached
# in /var/cache/abx) go once into build/images, the store every test's abxd shares.
step "building the base and code-interpreter images into build/images (scripts/build-images.sh)"
if ! scripts/build-images.sh --store build/images --abxd build/dev/src/platform/abxd; then
  echo "test.sh: building the images failed; the disk now:" >&2
  df -h . /var/cache >&2 || true
  exit 1
fi

step "running tests (dev preset)"
run_ctest dev --preset dev -j "$jobs" --timeout 300

if [ "$asan" = 1 ]; then
  step "building (asan preset)"
  cmake --preset asan
  build --preset asan
  step "running unit tests under AddressSanitizer + UBSan (asan preset)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_ctest asan --preset asan -j "$jobs" --timeout 600
  prune_if_short asan
fi

if [ "$tsan" = 1 ]; then
  # The concurrency-heavy unit tests (label tsan: the HTTP engine, the command server, MCP
  # sessions, the SQLite store) under ThreadSanitizer; only their targets are built.
  step "building the tsan-labelled tests (tsan preset)"
  cmake --preset tsan
  build --preset tsan --target http_test server_test mcp_test store_test
  step "running the concurrency-heavy unit tests under ThreadSanitizer (tsan preset)"
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    run_ctest tsan --preset tsan -j "$jobs" --timeout 600
  prune_if_short tsan
fi

if [ "$release" = 1 ]; then
  # Every target, tests and benches included: the release flags (-O2, _FORTIFY_SOURCE, -Werror)
  # report what the dev build does not (e.g. an ignored warn_unused_result). Built, not run.
  step "building (release preset, all targets)"
  cmake --preset release
  build --preset release
fi

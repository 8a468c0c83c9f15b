#!/usr/bin/env bash
# Runs every benchmark under bench/ (each bench/<name>.sh) in turn and prints their tables.
# Benchmarks are not tests: CI never runs this. Options are passed to every bench script; each
# ignores the ones it does not know (e.g. --no-build is common, --runs is sandbox_create's).
# Usage: bench/run.sh [--no-build] [...]      (see bench/README.md)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
status=0
for b in "$here"/*.sh; do
  [ "$(basename "$b")" = run.sh ] && continue
  echo "=== $(basename "$b" .sh) ===" >&2
  bash "$b" "$@" || { status=$?; echo "[bench] $(basename "$b") FAILED ($status)" >&2; }
done
exit "$status"

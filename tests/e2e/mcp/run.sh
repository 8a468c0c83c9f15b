#!/usr/bin/env bash
# Runs the MCP e2e test (node --test) with the official MCP TypeScript SDK. Installs the pinned
# SDK from package-lock.json first when node_modules is missing or older than the lock file, so
# a fresh clone needs nothing but node and npm (scripts/install-deps.sh). ctest passes the paths
# of abx-server and the command modules in ABX_SERVER_BIN, ABX_DEMO_MODULE, ABX_HINTED_MODULE,
# and ABX_MCP_TEST_FILE picks another test file (abxd_mcp.test.mjs: ABXD_BIN, ABX_CLI_BIN).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "mcp e2e: node and npm are required (scripts/install-deps.sh installs them)" >&2
  exit 1
fi
stamp=node_modules/.package-lock.json
if [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ]; then
  # Two ctest runs may race here: the lock keeps one npm ci at a time.
  exec 9>"${TMPDIR:-/tmp}/abx-mcp-e2e-npm-ci.lock"
  flock 9
  if [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ]; then
    npm ci --no-audit --no-fund --loglevel=error >&2
  fi
  flock -u 9
fi
exec node --test --test-reporter=spec "$@" "$here/${ABX_MCP_TEST_FILE:-mcp.test.mjs}"

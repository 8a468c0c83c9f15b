#!/bin/sh
# Builds and tests abx-commands against abxd ($ABXD_BIN, set by ctest: abx_commands_js_e2e).
# On a fresh clone (or after package-lock.json changed) it installs the pinned packages first
# (`npm ci`), then compiles (tsc: src/ -> dist/, examples/ -> dist-examples/) and runs
# `node --test`, with a Node >= 20.18 (scripts/node-env.sh).
set -eu
cd "$(dirname "$0")"

# shellcheck source=/dev/null
. ../../scripts/node-env.sh
echo "run.sh: node $(node -p 'process.versions.node') ($(command -v node))" >&2

# npm keeps a copy of the lock it installed from in node_modules/.package-lock.json.
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi

node node_modules/typescript/bin/tsc -p tsconfig.json
node node_modules/typescript/bin/tsc -p tsconfig.examples.json
exec node --test --test-reporter=spec "$@" test/unit.test.mjs test/commands.test.mjs

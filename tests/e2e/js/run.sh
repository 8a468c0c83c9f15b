#!/bin/sh
# Runs the E2B JS SDK end-to-end tests (sdk, lifecycle, network, parity and secrets .test.mjs; the
# code interpreter's, persistence's, volumes', the web console's and the E2B CLI's .test.mjs
# through ABX_JS_TESTS) against abxd ($ABXD_BIN, set by ctest).
# On a fresh clone it installs the pinned packages first (`npm ci`, from package-lock.json).
# The SDK needs Node >= 20.18 (scripts/node-env.sh puts one on PATH).
set -eu
cd "$(dirname "$0")"

# shellcheck source=/dev/null
. ../../../scripts/node-env.sh

if [ ! -d node_modules/e2b ] || [ ! -d node_modules/@e2b/code-interpreter ] ||
  [ ! -d node_modules/puppeteer-core ] || [ ! -d node_modules/@e2b/cli ]; then
  npm ci --no-audit --no-fund
fi

# ABX_JS_TESTS picks other files (tests/e2e/runc/run.sh runs runc.test.mjs this way).
# shellcheck disable=SC2086
exec node --test --test-reporter=spec "$@" ${ABX_JS_TESTS:-sdk.test.mjs lifecycle.test.mjs network.test.mjs parity.test.mjs secrets.test.mjs}

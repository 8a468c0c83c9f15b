#!/bin/sh
# Runs tests/e2e/cluster (three abxd nodes on a three-member etcd cluster, the official e2b JS
# SDK against node 1). The SDK is the one tests/e2e/js pins; installed there when missing.
set -eu
cd "$(dirname "$0")"
# shellcheck source=/dev/null
. ../../../scripts/node-env.sh
if [ ! -d ../js/node_modules/e2b ]; then (cd ../js && npm ci --no-audit --no-fund); fi
exec node --test --test-reporter=spec "${1:-cluster.test.mjs}"

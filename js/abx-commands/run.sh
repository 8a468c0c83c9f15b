#!/bin/sh
# Builds and tests abx-commands against abxd ($ABXD_BIN, set by ctest: abx_commands_js_e2e).
# On a fresh clone (or after package-lock.json changed) it installs the pinned packages first
# (`npm ci`), then compiles (tsc: src/ -> dist/, examples/ -> dist-examples/) and runs
# `node --test`. Node >= 20.18.1 is needed (the e2b SDK's floor); when the system's node is older
# (Debian 12 ships 18), the same Node 20 binary as tests/e2e/js/run.sh is taken from npm's
# registry (package node-linux-<arch>) into $ABX_NODE_DIR (default ~/.cache/abx-node), so both
# suites share one download. Keep need_*/node_version in step with tests/e2e/js/run.sh.
set -eu
cd "$(dirname "$0")"

need_major=20
need_minor=18
node_version=20.20.2

node_ok() {
  v=$("$1" -p 'process.versions.node' 2>/dev/null) || return 1
  major=${v%%.*}
  rest=${v#*.}
  minor=${rest%%.*}
  [ "$major" -gt "$need_major" ] || { [ "$major" -eq "$need_major" ] && [ "$minor" -ge "$need_minor" ]; }
}

if ! command -v npm >/dev/null 2>&1; then
  echo "run.sh: npm not found (scripts/install-deps.sh installs nodejs and npm)" >&2
  exit 1
fi

node_bin=$(command -v node || true)
if [ -z "$node_bin" ] || [ -n "${ABX_FORCE_NODE_DOWNLOAD:-}" ] || ! node_ok "$node_bin"; then
  case "$(uname -m)" in
    x86_64) arch=x64 ;;
    aarch64) arch=arm64 ;;
    *) echo "run.sh: node >= $need_major.$need_minor needed, none for $(uname -m)" >&2; exit 1 ;;
  esac
  dir=${ABX_NODE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/abx-node}
  node_bin=$dir/node_modules/node-linux-$arch/bin/node
  if ! node_ok "$node_bin"; then
    echo "run.sh: system node is missing or older than $need_major.$need_minor; fetching node-linux-$arch@$node_version from npm" >&2
    mkdir -p "$dir"
    npm install --prefix "$dir" --no-save --no-package-lock --no-audit --no-fund \
      "node-linux-$arch@$node_version"
  fi
  PATH=$(dirname "$node_bin"):$PATH
  export PATH
fi
echo "run.sh: node $(node -p 'process.versions.node') ($(command -v node))" >&2

# npm keeps a copy of the lock it installed from in node_modules/.package-lock.json.
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi

node node_modules/typescript/bin/tsc -p tsconfig.json
node node_modules/typescript/bin/tsc -p tsconfig.examples.json
exec node --test --test-reporter=spec "$@" test/unit.test.mjs test/commands.test.mjs

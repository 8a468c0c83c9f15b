# Sourced by the JS suites' run.sh (tests/e2e/js, js/abx-commands): puts a Node >= 20.18 on
# PATH. The e2b SDK needs it; Debian 12 ships 18, so when the system's node is missing or older
# the node-linux-<arch> package of npm's registry is installed into $ABX_NODE_DIR (default
# ~/.cache/abx-node), one download for every suite. ABX_FORCE_NODE_DOWNLOAD=1 takes it even when
# the system's node would do.
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

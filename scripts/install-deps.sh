#!/usr/bin/env bash
# Installs every build, test and benchmark dependency of abx from Debian 12's registry.
# Idempotent; needs root (or sudo). Usage: scripts/install-deps.sh [--no-bench] [--no-criu]
# Also builds CRIU 4.1.1 for checkpoint/restore (scripts/install-criu.sh; Debian 12's criu does not
# work on current kernels) unless --no-criu; if that fails, the checkpoint tests say so and skip.
set -euo pipefail

bench=1
criu=1
for a in "$@"; do
  case "$a" in
    --no-bench) bench=0 ;;
    --no-criu) criu=0 ;;
    *) echo "install-deps: unknown flag $a" >&2; exit 2 ;;
  esac
done

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

pkgs=(
  build-essential cmake ninja-build pkg-config git ca-certificates curl
  clang-14 libclang-rt-14-dev llvm-14 clang-format clang-tidy
  lld  # the linker every preset uses (CMakeLists.txt: 5x faster than ld.bfd on abxd)
  libboost1.81-dev libboost-json1.81-dev libboost-url1.81-dev libboost-system1.81-dev
  libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev
  libssl-dev libseccomp-dev libsqlite3-dev sqlite3
  libnghttp2-dev  # HTTP/2 on the egress proxy's intercepted flows (src/platform/egress_h2.cc)
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-pytest python3-yaml  # python/: pytest (ctest python_e2e), PyYAML for local template.yaml
  python3-pip python3-venv python3-wheel  # `pip install --no-build-isolation ./python`, offline
  libarchive-dev  # image layers (src/image)
  libmnl-dev libnftables-dev  # sandbox networking: veth/addresses over rtnetlink, the egress ruleset
  nftables  # tests: `nft list` to check the ruleset abxd installed
  iproute2 openssl  # tests/e2e/network/internet.sh: the test internet's netns, veth and TLS cert
  zlib1g-dev  # gzip: image layers (src/image) and envd's /files Content-/Accept-Encoding
  e2fsprogs  # mkfs.ext4: each sandbox's writable layer is an ext4 image capped at its disk size
  patchelf  # scripts/bundle.sh: the /opt/abx bundle's interpreter and RUNPATH
  # tests: the reference registry on loopback, skopeo as a peer/producer of images, a static
  # busybox and a musl toolchain for test images, runc/crun to run abx images elsewhere,
  # mmdebstrap to build the default Debian template from Debian's registry, htpasswd (bcrypt)
  docker-registry skopeo busybox-static musl-tools runc crun mmdebstrap apache2-utils
  libzmq3-dev cppzmq-dev  # abx-interp: Jupyter kernels over ZeroMQ (src/interp)
  python3-ipykernel  # tests of src/interp: a real IPython kernel on the host
  chromium  # tests/e2e/js/console.test.mjs: abxd's web console in a real browser (puppeteer-core)
  etcd-server etcd-client  # tests/e2e/cluster and src/cluster tests: abxd --cluster's etcd (3.4)
  ccache  # compiler cache: the dev, asan and release builds of one run share unchanged objects
)
# tests/e2e/mcp: the official MCP TypeScript SDK runs on Node (npm ci fetches it). Debian's
# nodejs + npm, unless a node with its own npm (e.g. NodeSource's) is already installed.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  pkgs+=(nodejs npm)
fi
# tests/e2e/js (the official E2B JS SDK against abxd) uses the same node and npm. Debian 12's
# node 18 is older than the SDK needs (>= 20.18.1): tests/e2e/js/run.sh then fetches a Node 20
# binary from npm's registry (package node-linux-<arch>), so no other source is needed.
if [ "$bench" = 1 ]; then
  pkgs+=(wrk nginx-light python3-fastapi python3-uvicorn)
  pkgs+=(nghttp2-client)  # h2load: bench/egress_rules.sh's HTTP/2 row
  # perf: where a bench's time goes (bench/lib/perf_command_server.sh, abxd's proxy in bench/README.md)
  pkgs+=(linux-perf)
  pkgs+=(bubblewrap)  # bench/sandbox_create: the namespace-setup floor to compare against
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
else
  echo "install-deps: installing ${#missing[@]} packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ "$criu" = 1 ]; then
  $sudo "$(dirname "$0")/install-criu.sh" ||
    echo "install-deps: WARNING: CRIU could not be built (see above); checkpoint/restore and its tests are unavailable" >&2
fi

#!/usr/bin/env bash
# Installs CRIU 4.1.1 for abx's "pause to disk" (checkpoint/restore of a sandbox) into a private
# prefix, built from Debian trixie's source package. Idempotent; needs root (or sudo).
#
# Why not Debian 12's `criu` package: its 3.17.1 does not start on current kernels (`criu check`
# fails with "vdso: Unexpected rt vDSO area bounds"); 4.1.1 works (see docs/design/criu-spike.md).
#
# What it does, in order:
#  1. If $ABX_CRIU (default /usr/local/lib/abx/criu/criu) exists, `--version` says 4.1.1 and
#     $ABX_CRIU.patches lists exactly the patches of scripts/criu-patches/ (sha256) and the make
#     variables of step 4, skips straight to step 6. (A binary built before RUNDIR was set has no
#     such line, so it is rebuilt.)
#  2. Installs the build dependencies with apt, from Debian 12's own registry only (the system's
#     configured sources; nothing else is added for binary packages).
#  3. Fetches the upstream tarball of the source package criu=4.1.1-1 from Debian trixie with
#     `apt-get source --download-only --tar-only` (only criu_4.1.1.orig.tar.xz: the build needs
#     nothing else, and some mirrors serve the .orig but not the .dsc/.debian.tar.xz), using a deb-src-ONLY entry that lives in a private
#     temporary directory, never in /etc/apt: apt is pointed at it with -o Dir::Etc::sourcelist,
#     Dir::Etc::sourceparts (an empty dir, so the system's entries are not read either) and
#     Dir::State::Lists (so trixie's Sources index never lands in /var/lib/apt/lists), and told
#     not to write its caches. A `deb` (binary) trixie entry must never be used: trixie's binary
#     packages would replace the system's glibc. The temporary directory, and with it the entry,
#     is removed by an EXIT trap, on success and on failure alike. apt still verifies the
#     download: Release signature (debian-archive-keyring has the trixie keys) -> Sources -> file
#     hashes.
#  4. Applies scripts/criu-patches/*.patch, then builds only the `criu` binary (`make criu
#     RUNDIR=/run/abx/criu`) from criu_4.1.1.orig.tar.xz (upstream's tarball). About half a minute
#     to two minutes on 2 cores.
#     RUNDIR is where criu keeps its cache of probed kernel features (criu.kdat; upstream's
#     default /run). CRIU writes that cache only on a tmpfs, because it is valid until the next
#     reboot: the file carries a magic and the build's time (so another build ignores it), no
#     boot id. Where /run is not a tmpfs (Debian 12 VMs here and on CI) every criu dump and
#     restore re-probed the kernel, 40-60 ms each. /run/abx/criu is abx's own: abxd mounts a
#     root-only (0700, 1 MiB) tmpfs there at start (runtime::prepare_criu_rundir), never a
#     world-writable place like /dev/shm, where a user could plant a forged cache for root's criu.
#     Without that tmpfs criu works as before, only slower. SOURCE_DATE_EPOCH is unset for the
#     build so that the cache's magic is the build's own time.
#     The patches (see docs/design/criu-spike.md for the failures they fix):
#     0001 upstream commit 4b7398595 (in CRIU 4.2): since Linux 6.16 getsockopt(SO_PASSCRED /
#          SO_PASSSEC) fails with EOPNOTSUPP on inet sockets, and 4.1.1 then fails to dump ANY
#          process with a TCP/UDP socket ("Can't get 1:16 opt") -- abx-envd always has one.
#     0002 abx-local: read /proc/<pid>/limits when prlimit64 fails with EPERM (root without
#          CAP_SYS_RESOURCE, as on abx's dev VMs: "Can't get rlimit 0: Operation not permitted").
#     0003 abx-local: open the target's /proc/<pid>/ns/* before entering its userns, so that a
#          restored abx-envd (non-dumpable) can be checkpointed again.
#     0004 abx-local: with --manage-cgroups=ignore, restored threads stay in their task's
#          cgroups (4.1.1 still sent them to its cgroupd, failing every multi-threaded restore).
#  5. Installs that one binary to $ABX_CRIU, and the patch list (with the make variables) to
#     $ABX_CRIU.patches. The prefix
#     /usr/local/lib/abx/criu/ is chosen because
#     /usr/local is never written by dpkg (so Debian's /usr/sbin/criu, if ever installed, is
#     neither replaced nor shadowed), lib/abx/ is not on PATH (abxd calls it by absolute path, so
#     another criu on PATH cannot be picked up by mistake, nor this one by other software), and
#     the path is distinct from /opt/abx, which inside a sandbox is the read-only bundle.
#  6. Runs `criu check` and prints its result (exit status of the script = that of the check).
#
# Usage: scripts/install-criu.sh            (env: ABX_CRIU=/path/to/criu to choose the binary path,
#                                            JOBS=N for make -j, default nproc)
set -euo pipefail

version=4.1.1
debver=4.1.1-1
dest="${ABX_CRIU:-/usr/local/lib/abx/criu/criu}"
jobs="${JOBS:-$(nproc)}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
patches=("$here"/criu-patches/*.patch)
rundir=/run/abx/criu  # = runtime::kCriuRunDir (include/abx/runtime/checkpoint.h)
makevars=("RUNDIR=$rundir")
patchlist="$(cd "$here/criu-patches" && sha256sum -- *.patch)
make ${makevars[*]}"

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

check() {
  echo "install-criu: $dest check:"
  local rc=0
  $sudo "$dest" check || rc=$?
  echo "install-criu: criu check exit status $rc"
  return $rc
}

if [ -x "$dest" ] && "$dest" --version 2>/dev/null | grep -q "Version: $version\$" &&
  [ "$(cat "$dest.patches" 2>/dev/null)" = "$patchlist" ]; then
  echo "install-criu: $dest is already CRIU $version with ${#patches[@]} patch(es)"
  check
  exit $?
fi

# 2. build dependencies (Debian 12)
deps=(build-essential pkg-config python3 patch
  libprotobuf-c-dev protobuf-c-compiler libprotobuf-dev protobuf-compiler python3-protobuf
  libnl-3-dev libnet1-dev libcap-dev libbsd-dev libaio-dev libnftables-dev libgnutls28-dev
  uuid-dev xz-utils ca-certificates)
missing=()
for p in "${deps[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-criu: installing ${#missing[@]} build dependencies: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# 3. the source package, through a private deb-src-only configuration
work="$(mktemp -d /tmp/abx-criu-build.XXXXXX)"
chmod 0755 "$work"  # apt's _apt download user must reach the private lists and source dirs
cleanup() { $sudo rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/apt/parts" "$work/apt/lists/partial" "$work/src"
cat >"$work/apt/trixie-src.list" <<EOF
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main
EOF
# apt drops privileges to _apt for downloads: let it write the private lists and source dirs.
if id _apt >/dev/null 2>&1; then $sudo chown -R _apt "$work/apt/lists" "$work/src"; fi
aptopts=(
  -o "Dir::Etc::sourcelist=$work/apt/trixie-src.list"
  -o "Dir::Etc::sourceparts=$work/apt/parts"
  -o "Dir::State::Lists=$work/apt/lists"
  -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache="
  -o "Acquire::Languages=none" -o "APT::Get::Only-Source=true"
)
echo "install-criu: fetching criu=$debver source from Debian trixie (deb-src only, private config)"
$sudo apt-get "${aptopts[@]}" update -qq
(cd "$work/src" && $sudo apt-get "${aptopts[@]}" source --download-only --tar-only "criu=$debver")
orig="$work/src/criu_${version}.orig.tar.xz"
[ -f "$orig" ] || { echo "install-criu: $orig not downloaded" >&2; exit 1; }

# 4. build the binary only
tar -C "$work" -xJf "$orig"
srcdir="$work/criu-$version"
[ -d "$srcdir" ] || srcdir="$(find "$work" -maxdepth 1 -type d -name 'criu-*' | head -1)"
for p in "${patches[@]}"; do
  echo "install-criu: applying $(basename "$p")"
  patch -d "$srcdir" -p1 --quiet --forward <"$p"
done
echo "install-criu: building criu $version (make -j$jobs criu ${makevars[*]})"
env -u SOURCE_DATE_EPOCH make -C "$srcdir" -j"$jobs" criu "${makevars[@]}" >"$work/build.log" 2>&1 || {
  tail -40 "$work/build.log" >&2
  echo "install-criu: build failed" >&2
  exit 1
}

# 5. install into the private prefix
$sudo install -D -m 0755 "$srcdir/criu/criu" "$dest"
printf '%s\n' "$patchlist" | $sudo tee "$dest.patches" >/dev/null
echo "install-criu: installed $("$dest" --version | tr '\n' ' ')at $dest"

# 6.
check

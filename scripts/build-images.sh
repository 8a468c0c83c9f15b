#!/usr/bin/env bash
# Builds abx's default image `base` — Debian 12 (bookworm) with bash, coreutils, python3 (also as
# `python`), sudo, git and curl, and the E2B default user `user` (uid 1000, passwordless sudo) —
# from Debian's own packages with mmdebstrap, and imports it into an image store as `base` (the
# `base` and `demo` templates run it as image abx:base). Independent of the host's files. Needs
# root and Debian's registry.
#
# It also builds `code-interpreter` (the code-interpreter template's image): base plus
# python3-ipykernel, numpy, pandas, matplotlib and a font, for abx-interp's Jupyter kernels.
#
# The mmdebstrap tarball is cached (keyed by this script's recipe), so a second run only
# re-imports (seconds), and an image store that already has `base` from the same tarball is
# left alone.
#
# Usage: scripts/build-images.sh [--store DIR] [--abxd BIN] [--cache DIR] [--mirror URL] [--only NAME]
#   --store   image store to import into (default $ABX_HOME/images, else ~/.abx/images)
#   --abxd    abxd binary (default build/release/src/platform/abxd, else build/dev/...)
#   --cache   where the tarball is kept (default /var/cache/abx)
#   --mirror  Debian mirror (default: the host's apt sources)
#   --only    base | code-interpreter: build just that image (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."

store="${ABX_HOME:-$HOME/.abx}/images"
abxd=""
cache=/var/cache/abx
mirror=""
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --store) store=$2; shift 2 ;;
    --abxd) abxd=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    --mirror) mirror=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "build-images: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
if [ -z "$abxd" ]; then
  for b in build/release/src/platform/abxd build/dev/src/platform/abxd; do
    [ -x "$b" ] && { abxd=$b; break; }
  done
fi
[ -n "$abxd" ] && [ -x "$abxd" ] || { echo "build-images: no abxd binary (build first, or --abxd)" >&2; exit 2; }
case "$only" in
  "") images=(base code-interpreter) ;;
  base|code-interpreter) images=("$only") ;;
  *) echo "build-images: --only takes base or code-interpreter, not '$only'" >&2; exit 2 ;;
esac
command -v mmdebstrap >/dev/null || { echo "build-images: mmdebstrap missing (scripts/install-deps.sh)" >&2; exit 2; }

# The recipes: what goes into each image. Changing one changes its cache key.
suite=bookworm
packages=bash,coreutils,python3,python-is-python3,python3-venv,sudo,ca-certificates,procps,less,curl,git,iproute2
# code-interpreter: base plus a Jupyter kernel and the data stack (abx-interp, docs/code-interpreter.md).
# fonts-dejavu-core: matplotlib's default font, so figures render without a font search.
interp_packages=$packages,python3-ipykernel,python3-numpy,python3-pandas,python3-matplotlib,fonts-dejavu-core
hook='chroot "$1" useradd --create-home --shell /bin/bash --uid 1000 --user-group user && echo "user ALL=(ALL:ALL) NOPASSWD: ALL" > "$1/etc/sudoers.d/user" && chmod 0440 "$1/etc/sudoers.d/user"'
# matplotlib in a kernel: the inline backend (figures become image/png results); outside one,
# Agg, since a sandbox has no display.
interp_hook="$hook"' && printf "backend: Agg\n" > "$1/etc/matplotlibrc"'

# build_image NAME PACKAGES HOOK: mmdebstrap into the cache (unless cached), then import as NAME.
build_image() {
  local name=$1 pkgs=$2 hk=$3
  local key tarball tmp
  key=$(printf '%s\n' "$suite" "$pkgs" "$hk" "$mirror" | sha256sum | cut -c1-16)
  if [ "$name" = base ]; then tarball="$cache/base-$suite-$key.tar"; else tarball="$cache/$name-$suite-$key.tar"; fi
  mkdir -p "$cache"
  if [ -f "$tarball" ] && [ -s "$tarball" ]; then
    echo "build-images: using cached $tarball"
  else
    echo "build-images: mmdebstrap $suite ($pkgs) -> $tarball"
    tmp="$cache/.$name-$suite-$key.$$.tar"  # mmdebstrap picks its output format by the .tar suffix
    trap 'rm -f "$tmp"' EXIT
    # SOURCE_DATE_EPOCH: the same packages give the same tarball.
    SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000} \
      mmdebstrap --quiet --variant=minbase --include="$pkgs" --customize-hook="$hk" \
        --aptopt='Acquire::Retries "3"' "$suite" "$tmp" ${mirror:+"$mirror"}
    mv "$tmp" "$tarball"
    trap - EXIT
  fi
  echo "build-images: importing into $store as $name"
  "$abxd" --image-store "$store" image import --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 "$name" "rootfs-tar:$tarball"
}

for image in "${images[@]}"; do
  case "$image" in
    base) build_image base "$packages" "$hook" ;;
    code-interpreter) build_image code-interpreter "$interp_packages" "$interp_hook" ;;
  esac
done

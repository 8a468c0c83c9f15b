#!/usr/bin/env bash
# Builds abx's default image `base` — Debian 12 (bookworm) with bash, coreutils, python3 (also as
# `python`), sudo, git and curl, and the E2B default user `user` (uid 1000, passwordless sudo) —
# from Debian's own packages with mmdebstrap, and imports it into an image store as `base` (the
# `base` and `demo` templates run it as image abx:base). Independent of the host's files. Needs
# root and Debian's registry.
#
# The mmdebstrap tarball is cached (keyed by this script's recipe), so a second run only
# re-imports (seconds), and an image store that already has `base` from the same tarball is
# left alone.
#
# Usage: scripts/build-images.sh [--store DIR] [--abxd BIN] [--cache DIR] [--mirror URL]
#   --store   image store to import into (default $ABX_HOME/images, else ~/.abx/images)
#   --abxd    abxd binary (default build/release/src/platform/abxd, else build/dev/...)
#   --cache   where the tarball is kept (default /var/cache/abx)
#   --mirror  Debian mirror (default: the host's apt sources)
set -euo pipefail
cd "$(dirname "$0")/.."

store="${ABX_HOME:-$HOME/.abx}/images"
abxd=""
cache=/var/cache/abx
mirror=""
while [ $# -gt 0 ]; do
  case "$1" in
    --store) store=$2; shift 2 ;;
    --abxd) abxd=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    --mirror) mirror=$2; shift 2 ;;
    *) echo "build-images: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
if [ -z "$abxd" ]; then
  for b in build/release/src/platform/abxd build/dev/src/platform/abxd; do
    [ -x "$b" ] && { abxd=$b; break; }
  done
fi
[ -n "$abxd" ] && [ -x "$abxd" ] || { echo "build-images: no abxd binary (build first, or --abxd)" >&2; exit 2; }
command -v mmdebstrap >/dev/null || { echo "build-images: mmdebstrap missing (scripts/install-deps.sh)" >&2; exit 2; }

# The recipe: what goes into the image. Changing it changes the cache key.
suite=bookworm
packages=bash,coreutils,python3,python-is-python3,python3-venv,sudo,ca-certificates,procps,less,curl,git
hook='chroot "$1" useradd --create-home --shell /bin/bash --uid 1000 --user-group user && echo "user ALL=(ALL:ALL) NOPASSWD: ALL" > "$1/etc/sudoers.d/user" && chmod 0440 "$1/etc/sudoers.d/user"'
key=$(printf '%s\n' "$suite" "$packages" "$hook" "$mirror" | sha256sum | cut -c1-16)
tarball="$cache/base-$suite-$key.tar"

mkdir -p "$cache"
if [ -f "$tarball" ] && [ -s "$tarball" ]; then
  echo "build-images: using cached $tarball"
else
  echo "build-images: mmdebstrap $suite ($packages) -> $tarball"
  tmp="$cache/.base-$suite-$key.$$.tar"  # mmdebstrap picks its output format by the .tar suffix
  trap 'rm -f "$tmp"' EXIT
  # SOURCE_DATE_EPOCH: the same packages give the same tarball.
  SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000} \
    mmdebstrap --quiet --variant=minbase --include="$packages" --customize-hook="$hook" \
      --aptopt='Acquire::Retries "3"' "$suite" "$tmp" ${mirror:+"$mirror"}
  mv "$tmp" "$tarball"
  trap - EXIT
fi

echo "build-images: importing into $store as base"
"$abxd" --image-store "$store" image import --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env LANG=C.UTF-8 base "rootfs-tar:$tarball"

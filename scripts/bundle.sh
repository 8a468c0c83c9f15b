#!/usr/bin/env bash
# Makes the /opt/abx bundle: abx's in-sandbox binaries with the glibc they were linked against,
# so they run in any image (Debian, musl, busybox, distroless, scratch). The binaries link
# libstdc++/libgcc statically; every library ldd resolves for them, directly or through another
# library (libc, libm, libzmq and libbsd, libsodium, ... for abx-interp, libasan/libubsan in the
# asan preset), is copied to lib/. Each binary gets the interpreter /opt/abx/lib/ld-linux-*.so.*
# and DT_RPATH /opt/abx/lib (patchelf --force-rpath): unlike DT_RUNPATH, which the loader applies
# to the binary's own DT_NEEDED only, an executable's DT_RPATH is searched for its libraries'
# libraries too, so libzmq's libbsd.so.0 comes from the bundle and not from the image (which may
# have none, or another version). A copied library that carries a search path of its own gets
# /opt/abx/lib instead. scripts/check-bundle.sh then checks the result (and fails the build).
# The originals are untouched: they still run on the host directly.
# --python DIR copies the abx Python package (DIR is python/abx) to python/abx: pure Python, run
# by the image's own python3 (abx-server --python; docs/python.md), never loaded into a binary.
# Usage: scripts/bundle.sh OUT_DIR [--prefix /opt/abx] [--python DIR] --bin FILE... [--lib FILE...]
set -euo pipefail

out="$1"; shift
prefix=/opt/abx
bins=(); mods=(); mode=""; pydir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix="$2"; shift ;;
    --python) pydir="$2"; shift ;;
    --bin) mode=bin ;;
    --lib) mode=lib ;;
    *) [ -n "$mode" ] || { echo "bundle: FILE before --bin/--lib" >&2; exit 2; }
       if [ "$mode" = bin ]; then bins+=("$1"); else mods+=("$1"); fi ;;
  esac
  shift
done
command -v patchelf >/dev/null || { echo "bundle: patchelf missing (scripts/install-deps.sh)" >&2; exit 1; }

tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp/bin" "$tmp/lib"
trap 'rm -rf "$tmp"' EXIT
for f in "${bins[@]}"; do cp "$f" "$tmp/bin/"; done
for f in "${mods[@]+"${mods[@]}"}"; do cp "$f" "$tmp/lib/"; done
if [ -n "$pydir" ]; then
  [ -f "$pydir/server/worker.py" ] || { echo "bundle: $pydir is not the abx package" >&2; exit 2; }
  mkdir -p "$tmp/python"
  cp -r "$pydir" "$tmp/python/abx"
  find "$tmp/python" -name __pycache__ -prune -exec rm -rf {} +
  # The bundle is mounted read-only: byte-compile now (for this host's python3, which is the base
  # image's; another version just compiles in memory), or every worker start would.
  if command -v python3 >/dev/null; then python3 -m compileall -q "$tmp/python" >/dev/null; fi
fi

# What the dynamic loader resolves for them on this host: "name => /path (addr)" lines and the
# loader's own "/path (addr)" line.
libs=$(for f in "${bins[@]}" "${mods[@]+"${mods[@]}"}"; do ldd "$f"; done |
  awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)
for l in $libs; do cp -L "$l" "$tmp/lib/$(basename "$l")"; done

interp=$(patchelf --print-interpreter "${bins[0]}")
for f in "$tmp"/bin/*; do
  patchelf --set-interpreter "$prefix/lib/$(basename "$interp")" --force-rpath \
    --set-rpath "$prefix/lib" "$f"
done
for f in "${mods[@]+"${mods[@]}"}"; do
  patchelf --force-rpath --set-rpath "$prefix/lib" "$tmp/lib/$(basename "$f")"
done
# A library with a DT_RUNPATH/DT_RPATH of its own (a host path) would look there, or, for
# DT_RUNPATH, stop the binary's DT_RPATH from applying to what it needs: point it at the bundle.
for f in "$tmp"/lib/*; do
  case "$(basename "$f")" in "$(basename "$interp")") continue ;; esac
  rpath=$(patchelf --print-rpath "$f")
  if [ -n "$rpath" ] && [ "$rpath" != "$prefix/lib" ]; then
    patchelf --force-rpath --set-rpath "$prefix/lib" "$f"
  fi
done

"$(dirname "$0")/check-bundle.sh" "$tmp" --prefix "$prefix"

rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT

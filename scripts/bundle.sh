#!/usr/bin/env bash
# Makes the /opt/abx bundle: abx's in-sandbox binaries with the glibc they were linked against,
# so they run in any image (Debian, musl, busybox, distroless, scratch). The binaries link
# libstdc++/libgcc statically and need glibc only; each copy gets the interpreter
# /opt/abx/lib/ld-linux-*.so.* and RUNPATH /opt/abx/lib (patchelf), and every library ldd
# resolves for them (libc, libm, ..., libasan/libubsan in the asan preset) is copied to lib/.
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
  patchelf --set-interpreter "$prefix/lib/$(basename "$interp")" --set-rpath "$prefix/lib" "$f"
done
for f in "${mods[@]+"${mods[@]}"}"; do patchelf --set-rpath "$prefix/lib" "$tmp/lib/$(basename "$f")"; done

rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT

#!/usr/bin/env bash
# Checks that an /opt/abx bundle (scripts/bundle.sh) is self-contained, without running anything:
# every ELF file in bin/ and lib/ has each of its DT_NEEDED libraries in lib/ (so the loader
# finds all of them, direct and indirect, inside the bundle); every binary's interpreter is the
# bundle's loader and its search path is a DT_RPATH of PREFIX/lib (a DT_RUNPATH would cover the
# binary's own DT_NEEDED only, and its libraries' libraries would come from the image); no library
# searches anywhere but PREFIX/lib. Prints one line per problem; exit 1 if there is any.
# Usage: scripts/check-bundle.sh BUNDLE_DIR [--prefix /opt/abx]
set -euo pipefail
export LC_ALL=C

dir="${1:?usage: check-bundle.sh BUNDLE_DIR [--prefix /opt/abx]}"; shift
prefix=/opt/abx
if [ "${1:-}" = --prefix ]; then prefix="$2"; fi
command -v readelf >/dev/null || { echo "check-bundle: readelf missing (binutils)" >&2; exit 2; }

problems=0
problem() { echo "check-bundle: $*" >&2; problems=$((problems + 1)); }
is_elf() { [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '177ELF' ]; }

# "<tag> <value>" for DT_NEEDED, DT_RPATH and DT_RUNPATH.
dynamic() {
  readelf -d "$1" | sed -nE 's/.*\((NEEDED|RPATH|RUNPATH)\)[^[]*\[(.*)\]$/\1 \2/p'
}

[ -d "$dir/bin" ] && [ -d "$dir/lib" ] || { echo "check-bundle: $dir has no bin/ and lib/" >&2; exit 2; }
nbin=0
for f in "$dir"/bin/* "$dir"/lib/*; do
  [ -f "$f" ] && is_elf "$f" || continue
  name="${f#"$dir"/}"
  dyn=$(dynamic "$f")
  while read -r tag value; do
    case "$tag" in
      NEEDED) [ -e "$dir/lib/$value" ] || problem "$name needs $value, which is not in lib/" ;;
      RUNPATH) case "$name" in
                 bin/*) problem "$name has DT_RUNPATH $value (want DT_RPATH $prefix/lib: a" \
                                "RUNPATH does not apply to its libraries' libraries)" ;;
                 *) [ "$value" = "$prefix/lib" ] || problem "$name searches $value" ;;
               esac ;;
      RPATH) [ "$value" = "$prefix/lib" ] || problem "$name searches $value" ;;
    esac
  done <<<"$dyn"
  case "$name" in
    bin/*)
      nbin=$((nbin + 1))
      interp=$(readelf -l "$f" | sed -nE 's/.*\[Requesting program interpreter: (.*)\]$/\1/p')
      case "$interp" in
        "") continue ;;  # static
        "$prefix"/lib/*) [ -e "$dir/lib/${interp#"$prefix"/lib/}" ] ||
                           problem "$name's interpreter $interp is not in lib/" ;;
        *) problem "$name's interpreter is $interp, outside the bundle" ;;
      esac
      grep -q "^RPATH $prefix/lib\$" <<<"$dyn" || problem "$name has no DT_RPATH $prefix/lib" ;;
  esac
done
[ "$nbin" -gt 0 ] || problem "no ELF binaries in $dir/bin"
if [ "$problems" -gt 0 ]; then
  echo "check-bundle: $dir: $problems problem(s)" >&2
  exit 1
fi
echo "check-bundle: $dir: $nbin binaries, every library they need is in lib/"

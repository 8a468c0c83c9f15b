#!/usr/bin/env bash
# Every module directory in src/ has its row in docs/architecture.md's module table (a line
# starting with "| `<name>` |"), and every row names a directory that exists (`testing` lives in
# tests/support). ctest (architecture_doc, label unit) and scripts/lint.sh run it.
# Usage: architecture_doc.sh [SOURCE_DIR]
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
doc=$root/docs/architecture.md
rc=0
for d in "$root"/src/*/; do
  m=$(basename "$d")
  if ! grep -q "^| \`$m\` |" "$doc"; then
    echo "src/$m has no row in docs/architecture.md's module table" >&2
    rc=1
  fi
done
while read -r m; do
  if [ "$m" != testing ] && [ ! -d "$root/src/$m" ]; then
    echo "docs/architecture.md lists a module \`$m\` that src/ does not have" >&2
    rc=1
  fi
done < <(sed -n 's/^| `\([a-z_]*\)` .*/\1/p' "$doc")
exit $rc

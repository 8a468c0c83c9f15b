#!/usr/bin/env bash
# Runs E2B's own JS SDK test suite (packages/js-sdk/tests of the e2b repository, unmodified, at
# $E2B_COMMIT) against abxd, one file at a time, and prints file -> passed/failed/skipped.
#
#   tests/e2e/e2b-suite/run.sh [FILE...]     # FILEs relative to packages/js-sdk; default files.txt
#
# Environment (all optional):
#   E2B_MIRROR      git dir of the e2b repository   (default /work/.mirror/e2b-dev+E2B/repo)
#   E2B_COMMIT      commit to test                  (default the one pinned below)
#   ABXD_BIN        abxd binary                     (default build/dev/src/platform/abxd)
#   ABX_IMAGE_STORE image store with "base"         (default build/images)
#   ABXD_ARGS       more abxd flags, split on spaces (e.g. "--envd-bin DIR/abx-envd")
#   SUITE_DIR       where the suite is exported and installed, reused across runs
#                   (default ~/.cache/abx-e2b-suite/<commit>)
#   FILE_TIMEOUT    seconds per file                (default 300)
#   OUT_DIR         per-file logs and JSON reports  (default a new temp dir, printed)
#
# The suite is exported with `git archive` and installed with the repository's pnpm lockfile
# (`pnpm install --frozen-lockfile`, pnpm fetched with npx); lifecycle scripts are not run and
# engine-strict is off (tsdown, which these tests do not use, wants Node 22). The tests import
# the SDK from its source (packages/js-sdk/src), so the SDK under test is that commit's, not
# tests/e2e/js's pinned npm package. abxd gets a home of its own and a dead DNS upstream; the
# SDK is pointed at it with E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY (E2B_DOMAIN and
# E2B_DEBUG unset). In the test processes names under .localhost (abxd's sandbox hosts, which
# some tests fetch) resolve to loopback (localhost-dns.cjs), so no lookup leaves the machine.
# After every file the sandboxes left behind are killed; at the end abxd is stopped and its
# home removed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)

E2B_MIRROR=${E2B_MIRROR:-/work/.mirror/e2b-dev+E2B/repo}
E2B_COMMIT=${E2B_COMMIT:-b8029973aa7da5f741f7bb1a9f833b38a0885438}
ABXD_BIN=${ABXD_BIN:-$root/build/dev/src/platform/abxd}
export ABX_IMAGE_STORE=${ABX_IMAGE_STORE:-$root/build/images}
SUITE_DIR=${SUITE_DIR:-$HOME/.cache/abx-e2b-suite/${E2B_COMMIT:0:12}}
FILE_TIMEOUT=${FILE_TIMEOUT:-300}
PNPM_VERSION=10.34.5
[ -x "$ABXD_BIN" ] || { echo "e2b-suite: no abxd at $ABXD_BIN (set ABXD_BIN)" >&2; exit 1; }

# shellcheck source=/dev/null
. "$root/scripts/node-env.sh"

# --- the suite, exported and installed once per commit ---
sdk=$SUITE_DIR/packages/js-sdk
if [ ! -x "$sdk/node_modules/.bin/vitest" ]; then
  echo "e2b-suite: exporting e2b@${E2B_COMMIT:0:12} into $SUITE_DIR and installing its packages"
  rm -rf "$SUITE_DIR"
  mkdir -p "$SUITE_DIR"
  git --git-dir="$E2B_MIRROR" archive "$E2B_COMMIT" packages package.json pnpm-lock.yaml \
    pnpm-workspace.yaml .npmrc | tar -x -C "$SUITE_DIR"
  (cd "$SUITE_DIR" && npx -y "pnpm@$PNPM_VERSION" install --frozen-lockfile \
    --filter ./packages/js-sdk --ignore-scripts --config.engine-strict=false)
fi

if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(grep -v '^#' "$here/files.txt" | grep .)
fi

OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/e2b-suite.XXXXXX)}
mkdir -p "$OUT_DIR"

# --- abxd ---
home=$(mktemp -d /tmp/e2b-suite-home.XXXXXX)
# shellcheck disable=SC2086
"$ABXD_BIN" --home "$home" --listen 127.0.0.1:0 --dns-upstream 127.0.0.1:9 --pause disk \
  ${ABXD_ARGS:-} >"$OUT_DIR/abxd.out" 2>"$OUT_DIR/abxd.err" &
abxd_pid=$!
api=""
api_key=""

kill_sandboxes() {
  [ -n "$api" ] || return 0
  local ids id n=0
  # Pages of at most 100 (abxd's limit); each round kills one page.
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    ids=$(curl -fsS -H "X-API-Key: $api_key" "$api/v2/sandboxes?state=running,paused&limit=100" |
      jq -r '.[].sandboxID') || return 0
    [ -n "$ids" ] || break
    for id in $ids; do
      curl -fsS -o /dev/null -X DELETE -H "X-API-Key: $api_key" "$api/sandboxes/$id" || true
      n=$((n + 1))
    done
  done
  [ "$n" -eq 0 ] || echo "  (killed $n leftover sandboxes)"
}

cleanup() {
  kill_sandboxes || true
  if kill -0 "$abxd_pid" 2>/dev/null; then
    kill -TERM "$abxd_pid"
    wait "$abxd_pid" 2>/dev/null || true
  fi
  rm -rf "$home"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for _ in $(seq 200); do
  port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$OUT_DIR/abxd.out")
  [ -n "$port" ] && break
  kill -0 "$abxd_pid" 2>/dev/null || { cat "$OUT_DIR/abxd.err" >&2; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "e2b-suite: abxd did not print its address" >&2; exit 1; }
api=http://127.0.0.1:$port
api_key=$(cat "$home/api_key")
export E2B_API_URL=$api E2B_SANDBOX_URL=$api E2B_API_KEY=$api_key
unset E2B_DOMAIN E2B_DEBUG E2B_ACCESS_TOKEN
echo "e2b-suite: abxd on $api (home $home); logs and reports in $OUT_DIR"

# --- one file at a time ---
table=$OUT_DIR/table.txt
printf '%-52s %6s %6s %7s  %s\n' file passed failed skipped note >"$table"
total_p=0 total_f=0 total_s=0
for f in "${files[@]}"; do
  case "$f" in
    tests/template/*) project=template ;;
    tests/connectionConfig.test.ts) project=connectionConfig ;;
    *) project=unit ;;
  esac
  name=${f#tests/}
  name=${name%.test.ts}
  log=$OUT_DIR/${name//\//_}.log
  json=$OUT_DIR/${name//\//_}.json
  echo "== $f"
  start=$(date +%s)
  rc=0
  (cd "$sdk" && NODE_OPTIONS="--require $here/localhost-dns.cjs" \
    timeout -k 10 "$FILE_TIMEOUT" node_modules/.bin/vitest run --project "$project" \
    --reporter=default --reporter=json --outputFile.json="$json" "$f") >"$log" 2>&1 || rc=$?
  secs=$(($(date +%s) - start))
  note="${secs}s"
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    note="$note TIMEOUT"
  fi
  if [ -s "$json" ]; then
    read -r p fl s < <(jq -r '[.numPassedTests, .numFailedTests,
      (.numPendingTests + .numTodoTests)] | @tsv' "$json")
    # A file that fails before running any test (import error, hook failure) counts as one failure.
    if [ "$fl" -eq 0 ] && [ "$rc" -ne 0 ]; then
      fl=1
      note="$note file-error"
    fi
  else
    p=0 fl=1 s=0
    note="$note no-report"
  fi
  total_p=$((total_p + p)) total_f=$((total_f + fl)) total_s=$((total_s + s))
  printf '%-52s %6s %6s %7s  %s\n' "$f" "$p" "$fl" "$s" "$note" | tee -a "$table"
  kill_sandboxes
done
printf '%-52s %6s %6s %7s\n' TOTAL "$total_p" "$total_f" "$total_s" >>"$table"

# Failure messages, one block per failed test (the first lines of each).
if compgen -G "$OUT_DIR/*.json" >/dev/null; then
  for j in "$OUT_DIR"/*.json; do
    jq -r '.testResults[] | .name as $file | .assertionResults[] | select(.status == "failed") |
      "\($file | sub(".*/packages/js-sdk/"; "")) :: \(.fullName)\n    " +
      ((.failureMessages[0] // "") | split("\n")[0:3] | join("\n    "))' "$j"
  done >"$OUT_DIR/failures.txt"
fi
echo
cat "$table"
echo "e2b-suite: failures in $OUT_DIR/failures.txt, logs in $OUT_DIR"

#!/usr/bin/env bash
# "Serve your own commands in three commands" (README), end to end with the real pieces: a user
# module built against the *installed* SDK (the sdk component in a temporary prefix), then
#   1. abx template build -t mytools ctx     (Dockerfile FROM base + COPY, template.yaml: server)
#   2. abx sandbox create mytools
#   3. abx run <id> greet -a name=you -a times=2
# against a real abxd with real sandboxes. ctest passes ABX_BUILD_DIR, ABXD_BIN, ABX_CLI_BIN,
# ABX_IMAGE_STORE.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../lib/abxd.sh
. "$here/../lib/abxd.sh"
work="$(mktemp -d "${TMPDIR:-/tmp}/abx-serve-own.XXXXXX")"
sandbox=""
cleanup() {
  if [ -n "$sandbox" ]; then "$ABX_CLI_BIN" sandbox kill "$sandbox" >/dev/null 2>&1 || true; fi
  stop_abxd
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "serve-own: $*" >&2; [ -f "$work/abxd.log" ] && tail -30 "$work/abxd.log" >&2; exit 1; }

# The module: ABX_REGISTER, one compiler line against the installed headers.
cmake --install "$ABX_BUILD_DIR" --prefix "$work/prefix" --component sdk >/dev/null
mkdir -p "$work/ctx"
c++ -std=c++20 -O2 -shared -fPIC -static-libstdc++ -static-libgcc -I"$work/prefix/include" \
  -o "$work/ctx/libmytools.so" "$here/../../sdk_consumer/my_commands.cc"
cat >"$work/ctx/Dockerfile" <<'DOCKERFILE'
FROM base
COPY libmytools.so /opt/tools/libmytools.so
DOCKERFILE
cat >"$work/ctx/template.yaml" <<'YAML'
id: mytools
server:
  command: [/opt/abx/bin/abx-server, --module, /opt/tools/libmytools.so, --port, "49982"]
  port: 49982
YAML

start_abxd "$work/home" "$work/abxd.log" || fail "abxd did not start"
export ABX_HOME="$work/client"  # the CLI has no copy of the template: all from the platform

"$ABX_CLI_BIN" template build -t mytools "$work/ctx" >"$work/build.out" 2>&1 ||
  { cat "$work/build.out" >&2; fail "abx template build failed"; }
sandbox=$("$ABX_CLI_BIN" sandbox create mytools) || fail "abx sandbox create failed"
[ -n "$sandbox" ] || fail "no sandbox id"
# Create returned once the command server listened: the first call is served.
got=$("$ABX_CLI_BIN" run "$sandbox" greet -a name=you -a times=2 2>"$work/run.err")
[ "$got" = "hello you hello you" ] || { cat "$work/run.err" >&2; fail "abx run printed '$got'"; }
"$ABX_CLI_BIN" commands list "$sandbox" >"$work/list.out" 2>&1 || fail "commands list failed"
grep -q "greet" "$work/list.out" || { cat "$work/list.out" >&2; fail "greet not listed"; }

# A template whose server cannot start (the module path is wrong): create fails with the
# server's own error, and no sandbox is left.
mkdir -p "$work/broken"
cp "$work/ctx/Dockerfile" "$work/ctx/libmytools.so" "$work/broken/"
sed -e 's/^id: mytools/id: broken/' -e 's#/opt/tools/libmytools.so#/opt/tools/nosuch.so#' \
  "$work/ctx/template.yaml" >"$work/broken/template.yaml"
"$ABX_CLI_BIN" template build -t broken "$work/broken" >"$work/build2.out" 2>&1 ||
  { cat "$work/build2.out" >&2; fail "abx template build (broken) failed"; }
if "$ABX_CLI_BIN" sandbox create broken >"$work/create2.out" 2>"$work/create2.err"; then
  fail "create of a template whose server cannot start succeeded: $(cat "$work/create2.out")"
fi
grep -q "its command server did not start" "$work/create2.err" &&
  grep -q "nosuch.so" "$work/create2.err" ||
  { cat "$work/create2.err" >&2; fail "create's error does not carry the server's own"; }
[ "$("$ABX_CLI_BIN" --json sandbox list | grep -o '"sandboxID"' | wc -l)" = 1 ] ||
  fail "the failed create left a sandbox: $("$ABX_CLI_BIN" sandbox list)"
# The same module FROM scratch (issue 38 item 6): with the static C++ runtime it needs nothing of
# the image; abx-server comes from the /opt/abx bundle every sandbox has.
"$ABX_CLI_BIN" sandbox kill "$sandbox" >/dev/null || fail "abx sandbox kill failed"
sandbox=""
mkdir -p "$work/scratch"
cp "$work/ctx/libmytools.so" "$work/scratch/"
printf 'FROM scratch\nCOPY libmytools.so /opt/tools/libmytools.so\n' >"$work/scratch/Dockerfile"
sed -e 's/^id: mytools/id: mytools-scratch/' "$work/ctx/template.yaml" >"$work/scratch/template.yaml"
"$ABX_CLI_BIN" template build -t mytools-scratch "$work/scratch" >"$work/build3.out" 2>&1 ||
  { cat "$work/build3.out" >&2; fail "abx template build (FROM scratch) failed"; }
sandbox=$("$ABX_CLI_BIN" sandbox create mytools-scratch 2>"$work/create3.err") ||
  { cat "$work/create3.err" >&2; fail "abx sandbox create mytools-scratch failed"; }
got=$("$ABX_CLI_BIN" run "$sandbox" greet -a name=scratch 2>"$work/run3.err")
[ "$got" = "hello scratch" ] || { cat "$work/run3.err" >&2; fail "FROM scratch: abx run printed '$got'"; }
echo "serve-own: module built against the installed SDK, template built, sandbox created, command run, FROM scratch too: ok"

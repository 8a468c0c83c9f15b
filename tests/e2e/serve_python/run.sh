#!/usr/bin/env bash
# "Serve Python functions" (README; issue 37), end to end: the README's own blocks, extracted
# and run as written — tools.py, then the shell block (`abx commands list --module`, `abx
# template build`, `abx sandbox create`, `abx run`) — against a real abxd with real sandboxes;
# then GET /commands through abxd, more calls, and a module that fails to import failing the
# create with its traceback. ctest passes ABXD_BIN, ABX_CLI_BIN, ABX_IMAGE_STORE, ABX_README.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../lib/abxd.sh
. "$here/../lib/abxd.sh"
work="$(mktemp -d "${TMPDIR:-/tmp}/abx-serve-python.XXXXXX")"
cleanup() {
  if [ -n "${ABXD_PID:-}" ]; then
    for id in $("$ABX_CLI_BIN" --json sandbox list 2>/dev/null |
      grep -o '"sandboxID":"[^"]*"' | cut -d'"' -f4); do
      "$ABX_CLI_BIN" sandbox kill "$id" >/dev/null 2>&1 || true
    done
  fi
  stop_abxd
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "serve-python: $*" >&2; [ -f "$work/abxd.log" ] && tail -30 "$work/abxd.log" >&2; exit 1; }

# The README section's blocks, verbatim: block LANG [N] prints its Nth (default first) LANG block.
block() {
  awk -v lang="$1" -v want="${2:-1}" '
    /^## / { in_sec = ($0 == "## Serve Python functions") }
    in_sec && $0 == "```" lang { n++; if (n == want) { grab = 1; next } }
    grab && $0 == "```" { grab = 0 }
    grab { print }' "$ABX_README"
}
mkdir -p "$work/ctx" "$work/bin"
block python >"$work/ctx/tools.py"
block sh >"$work/quickstart.sh"
block python 2 >"$work/host.py"
grep -q "server.call" "$work/host.py" || fail "no host SDK block in the README section"
grep -q "@sandbox.register" "$work/ctx/tools.py" || fail "no python block in the README section"
grep -q "abx sandbox create" "$work/quickstart.sh" || fail "no sh block in the README section"
ln -s "$ABX_CLI_BIN" "$work/bin/abx"

start_abxd "$work/home" "$work/abxd.log" || fail "abxd did not start"
export ABX_HOME="$work/client"

# The quickstart as written (plus one line after it that hands us the sandbox id).
(cd "$work" && echo 'echo "sandbox-id=$id"' >>quickstart.sh &&
  PATH="$work/bin:$PATH" bash -euo pipefail quickstart.sh) >"$work/qs.out" 2>"$work/qs.err" ||
  { cat "$work/qs.out" "$work/qs.err" >&2; fail "the README's quickstart failed"; }
id=$(sed -n 's/^sandbox-id=//p' "$work/qs.out")
[ -n "$id" ] || fail "no sandbox id"
# Layer 1 listed both commands before any server existed.
grep -q "demo" "$work/qs.out" && grep -q "bump" "$work/qs.out" ||
  { cat "$work/qs.out" >&2; fail "abx commands list --module did not list demo and bump"; }
# demo, then bump twice; the listing comes first, so compare the last three result lines.
got=$(grep -v '^sandbox-id=' "$work/qs.out" | tail -3 | tr '\n' '|')
[ "$got" = "42: world|1|2|" ] || { cat "$work/qs.out" >&2; fail "quickstart printed '$got'"; }

# The worker was the one envd started beside abx-server (issue 37: --server-companion-argv),
# not one abx-server started after its own start-up.
"$ABX_CLI_BIN" logs "$id" >"$work/logs.out" 2>&1 || { cat "$work/logs.out" >&2; fail "abx logs failed"; }
grep -q "Python command(s) from .*started by envd" "$work/logs.out" ||
  { tail -20 "$work/logs.out" >&2; fail "the sandbox's Python worker was not the one envd started"; }

# The build byte-compiled the module (issue 37: create -> first call): a checked-hash .pyc of
# this very source in its __pycache__, the one the worker's import reads instead of compiling.
"$ABX_CLI_BIN" exec "$id" -- python3 -c '
import importlib.util, sys
pyc = importlib.util.cache_from_source("/opt/tools/tools.py")
data = open(pyc, "rb").read()
assert data[:4] == importlib.util.MAGIC_NUMBER, data[:4]
assert int.from_bytes(data[4:8], "little") == 3, "not a checked-hash pyc"
assert data[8:16] == importlib.util.source_hash(open("/opt/tools/tools.py", "rb").read())
print("pyc ok")' >"$work/pyc.out" 2>&1 || { cat "$work/pyc.out" >&2; fail "no valid .pyc of the module"; }
# ...and an import of the module reads it (python3 -v names where each code object came from).
"$ABX_CLI_BIN" exec "$id" -- env PYTHONPATH=/opt/abx/python python3 -v -c \
  'import sys; sys.path.insert(0, "/opt/tools"); import tools' >"$work/pyv.out" 2>&1 ||
  { tail -20 "$work/pyv.out" >&2; fail "importing the module in the sandbox failed"; }
grep -q "code object from '/opt/tools/__pycache__/tools\." "$work/pyv.out" ||
  { grep tools "$work/pyv.out" >&2; fail "the module's import compiled it instead of reading its .pyc"; }

# The host SDK block as written (the SDK from this source tree), with its own sandboxes: each
# starts with a fresh module, so bump is 1 then 2; both sandboxes are gone after it.
before=$("$ABX_CLI_BIN" --json sandbox list | grep -o '"sandboxID"' | wc -l)
PYTHONPATH="$ABX_PYTHON_DIR" /usr/bin/python3 "$work/host.py" >"$work/host.out" 2>"$work/host.err" ||
  { cat "$work/host.out" "$work/host.err" >&2; fail "the README's host SDK block failed"; }
got=$(tr '\n' '|' <"$work/host.out")
[ "$got" = "42: world|1 2|7: hello|" ] || { cat "$work/host.err" >&2; fail "host.py printed '$got'"; }
[ "$("$ABX_CLI_BIN" --json sandbox list | grep -o '"sandboxID"' | wc -l)" = "$before" ] ||
  fail "the host SDK block left a sandbox"

# State persists: the third bump is 3.
[ "$("$ABX_CLI_BIN" run "$id" bump)" = 3 ] || fail "bump did not return 3"
[ "$("$ABX_CLI_BIN" run "$id" bump -a by=10)" = 13 ] || fail "bump by=10 did not return 13"

# GET /commands through abxd: both commands, a type on every argument, defaults, required,
# the docstring as description.
"$ABX_CLI_BIN" --json commands list "$id" >"$work/list.json" || fail "commands list failed"
python3 - "$work/list.json" <<'PY' || fail "GET /commands through abxd: $(cat "$work/list.json")"
import json, sys
cmds = {c["name"]: c for c in json.load(open(sys.argv[1]))["commands"]}
demo, bump = cmds["demo"], cmds["bump"]
assert demo["source"] == "remote" and bump["source"] == "remote", cmds
assert demo["description"] == "Run a demo command.", demo
assert bump["description"] == "State persists between calls.", bump
args = {a["name"]: a for a in demo["args"]}
assert args["x"]["type"] == "integer" and args["x"]["required"] is True, args
assert args["y"]["type"] == "string" and args["y"]["default"] == "hello", args
assert bump["args"][0] == {"name": "by", "type": "integer", "required": False, "default": 1,
                           "description": ""}, bump["args"]
PY

# Bad arguments are the C++ registry's 400s, a Python exception would be its class.
if "$ABX_CLI_BIN" run "$id" demo -a y=world >"$work/bad.out" 2>"$work/bad.err"; then
  fail "demo without x succeeded"
fi
grep -q "x" "$work/bad.err" || { cat "$work/bad.err" >&2; fail "no message naming x"; }

# A module that does not import: create fails with the Python traceback, no sandbox is left.
mkdir -p "$work/broken"
cp "$work/ctx/Dockerfile" "$work/broken/"
printf 'from abx import sandbox\n\n@sandbox.register\ndef broken(x: int:\n    return x\n' \
  >"$work/broken/tools.py"
sed 's/^id: pytools/id: brokenpy/' "$work/ctx/template.yaml" >"$work/broken/template.yaml"
"$ABX_CLI_BIN" template build -t brokenpy "$work/broken" >"$work/build2.out" 2>&1 ||
  { cat "$work/build2.out" >&2; fail "abx template build (broken) failed"; }
# Its byte-compile step failed without failing the build; the create below says why.
grep -q "was not byte-compiled" "$work/build2.out" ||
  { cat "$work/build2.out" >&2; fail "the build did not note the module's failed byte-compile"; }
before=$("$ABX_CLI_BIN" --json sandbox list | grep -o '"sandboxID"' | wc -l)
if "$ABX_CLI_BIN" sandbox create brokenpy >"$work/create2.out" 2>"$work/create2.err"; then
  fail "create of a template whose module does not import succeeded: $(cat "$work/create2.out")"
fi
grep -q "SyntaxError" "$work/create2.err" && grep -q 'tools.py", line 4' "$work/create2.err" ||
  { cat "$work/create2.err" >&2; fail "create's error does not carry the Python traceback"; }
[ "$("$ABX_CLI_BIN" --json sandbox list | grep -o '"sandboxID"' | wc -l)" = "$before" ] ||
  fail "the failed create left a sandbox"
echo "serve-python: README quickstart run verbatim, state kept, GET /commands typed, broken module refused with its traceback: ok"

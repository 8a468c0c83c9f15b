#!/usr/bin/env bash
# E2B's secrets (issue 39 item 5; docs/abxd.md "Secrets", docs/networking.md "Secrets in
# network.rules") end to end: a real abxd, a real sandbox of the base image, and the test's own
# internet of rules.sh (internet.sh: HTTPS servers signed by the run's test CA, which abxd trusts
# with --egress-extra-ca). The servers log the Authorization headers they receive (servers.py),
# on the host, never in a response.
#
# Proves: /secrets CRUD in E2B's shapes and statuses (201/200/204, 400 naming the field, 404,
# 409); a value is in no answer (create, list, get, update), not in abx.db (sealed), nor in the
# sandbox, GET /sandboxes/{id}, the audit or abxd's log; versions count up; another team sees
# none of it; a rule naming a missing secret is a 400 naming the header's field (create and
# PUT); a sandbox's request gets the secret's value from the proxy, and the next request after an
# update gets the new one; a secret a live sandbox's rules name cannot be deleted (409); after an
# abxd restart the value still opens (secrets.key); without a secret the request is refused
# (502), not sent without its credential.
# ctest passes ABXD_BIN, ABX_CLI_BIN, ABX_IMAGE_STORE and ABX_INET_INDEX. Needs root.
set -euo pipefail
label="secrets e2e"
idx="${ABX_INET_INDEX:-9}"
name="abxs$idx"
fail_details() { [ -n "${INET_DIR:-}" ] && { echo "--- https log"; tail -20 "$INET_DIR/https-$INET_WEB.log"; }; }
source "$(dirname "${BASH_SOURCE[0]}")/fixture.sh"
abxd_flags=(--egress-extra-ca "$INET_CA")
start_abxd
# Every answer body is kept (answers/) so that the end can check none holds a value.
mkdir -p "$work/answers"
api() {
  curl -sS -o "$work/body" -w '%{http_code}' -H "X-API-KEY: ${KEY:-$ABX_API_KEY}" "$@"
  cp "$work/body" "$(mktemp "$work/answers/a.XXXXXX")"
}
jpost() { local url=$1 body=$2; shift 2; api -X POST -H 'Content-Type: application/json' -d "$body" "$@" "$url"; }
# `field k1 k2 ...`: body[k1][k2]... (a digit is a list index); objects and lists as JSON.
field() {
  python3 - "$work/body" "$@" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2:]:
    v = v[int(k)] if k.isdigit() else v[k]
print(json.dumps(v, separators=(",", ":")) if isinstance(v, (dict, list)) else v)
PY
}
log="$INET_DIR/https-$INET_WEB.log"
v1="s1-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
v2="s2-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"

step "create: 201, E2B's Secret, the name lower-cased, never the value"
code=$(jpost "$ABX_API_URL/secrets" "{\"name\":\"Web-Token\",\"value\":\"$v1\",\"metadata\":{\"env\":\"test\"}}")
[ "$code" = 201 ] || fail "create: $code $(cat "$work/body")"
sid=$(field secretID)
[[ "$sid" =~ ^sec_[0-9a-f]{24}$ ]] || fail "secretID: $sid"
[ "$(field name)" = web-token ] && [ "$(field currentVersion)" = 1 ] &&
  [ "$(field metadata env)" = test ] || fail "create body: $(cat "$work/body")"
python3 - "$work/body" <<'PY' || fail "create body fields: $(cat "$work/body")"
import json, sys
o = json.load(open(sys.argv[1]))
sys.exit(0 if set(o) == {"secretID", "name", "currentVersion", "metadata", "createdAt", "updatedAt"} else 1)
PY

step "bad input: 400 naming the field; a taken name: 409; unknown: 404"
code=$(jpost "$ABX_API_URL/secrets" "{\"name\":\"web-token\",\"value\":\"x\"}")
[ "$code" = 409 ] || fail "same name: $code $(cat "$work/body")"
for body in '{"name":"sec_x","value":"v"}' '{"name":"a b","value":"v"}' '{"name":"x"}' \
  '{"name":"x","value":"a\nb"}' "{\"name\":\"x\",\"value\":\"$(head -c 65537 /dev/zero | tr '\0' a)\"}"; do
  code=$(jpost "$ABX_API_URL/secrets" "$body")
  [ "$code" = 400 ] && grep -q '"message":"\(name\|value\)' "$work/body" ||
    fail "bad create ${body:0:40}: $code $(cat "$work/body")"
done
code=$(api "$ABX_API_URL/secrets/nope")
[ "$code" = 404 ] || fail "unknown: $code"
code=$(jpost "$ABX_API_URL/secrets/nope" '{"value":"v"}')
[ "$code" = 404 ] || fail "update unknown: $code"
code=$(api -X DELETE "$ABX_API_URL/secrets/nope")
[ "$code" = 404 ] || fail "delete unknown: $code"

step "list and get (by id and by name): metadata only"
code=$(api "$ABX_API_URL/secrets")
[ "$code" = 200 ] && [ "$(field 0 secretID)" = "$sid" ] || fail "list: $code $(cat "$work/body")"
for key in "$sid" web-token WEB-TOKEN; do
  code=$(api "$ABX_API_URL/secrets/$key")
  [ "$code" = 200 ] && [ "$(field secretID)" = "$sid" ] && [ "$(field usedBy)" = "[]" ] ||
    fail "get $key: $code $(cat "$work/body")"
done
jpost "$ABX_API_URL/secrets" '{"name":"second","value":"v"}' >/dev/null
code=$(api "$ABX_API_URL/secrets?limit=1")
[ "$code" = 200 ] && [ "$(field 0 name)" = second ] || fail "page 1: $(cat "$work/body")"
tok=$(grep -i '^x-next-token' <(curl -sS -D - -o /dev/null -H "X-API-KEY: $ABX_API_KEY" "$ABX_API_URL/secrets?limit=1") | tr -d '\r' | cut -d' ' -f2)
[ "$tok" = second ] || fail "X-Next-Token: '$tok'"
code=$(api "$ABX_API_URL/secrets?limit=1&nextToken=$tok")
[ "$(field 0 name)" = web-token ] || fail "page 2: $(cat "$work/body")"

step "another team sees none of them"
"$ABXD_BIN" --home "$work/home" teams create team-b >/dev/null 2>&1 || fail "teams create"
keyb=$("$ABXD_BIN" --home "$work/home" keys create --name b --team team-b 2>/dev/null) || fail "keys create"
code=$(KEY=$keyb api "$ABX_API_URL/secrets")
[ "$code" = 200 ] && [ "$(cat "$work/body")" = "[]" ] || fail "team-b list: $code $(cat "$work/body")"
code=$(KEY=$keyb api "$ABX_API_URL/secrets/$sid")
[ "$code" = 404 ] || fail "team-b get: $code"
code=$(KEY=$keyb jpost "$ABX_API_URL/secrets/web-token" '{"value":"stolen"}')
[ "$code" = 404 ] || fail "team-b update: $code"

rules() {  # a create body whose rule puts secret $1 in Authorization for web.abx.test
  python3 -c 'import json,sys; print(json.dumps({"templateID":"base","timeout":600,"network":{"rules":{"web.abx.test":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.%s}" % sys.argv[1]}}}]}}}))' "$1"
}

step "a rule naming a missing secret: 400 naming the header (another team's is missing too)"
code=$(jpost "$ABX_API_URL/sandboxes" "$(rules missing)")
[ "$code" = 400 ] && grep -q 'network.rules\[\\"web.abx.test\\"\]\[0\].transform.headers\[\\"Authorization\\"\]: secret .missing. not found' "$work/body" ||
  fail "missing: $code $(cat "$work/body")"
code=$(KEY=$keyb jpost "$ABX_API_URL/sandboxes" "$(rules web-token)")
[ "$code" = 400 ] || fail "team-b naming team a's secret: $code $(cat "$work/body")"

step "a sandbox whose rule names the secret: the request carries its value"
code=$(jpost "$ABX_API_URL/sandboxes" "$(rules web-token)")
[ "$code" = 201 ] || fail "create sandbox: $code $(cat "$work/body")"
sb=$(field sandboxID)
code=$(api "$ABX_API_URL/sandboxes/$sb")
grep -q '"Authorization":"Bearer ${e2b.secrets.web-token}"' "$work/body" || fail "GET rules: $(cat "$work/body")"
: >"$log"
got=$(scurl "$sb" "https://web.abx.test/one")
[ "$got" = "host=10 hosthdr=web.abx.test" ] || fail "curl: $got"
grep -q "hdr Authorization=Bearer $v1\$" "$log" || fail "server did not get v1: $(cat "$log")"
code=$(api "$ABX_API_URL/secrets/web-token")
[ "$(field usedBy)" = "[\"$sb\"]" ] || fail "usedBy: $(cat "$work/body")"

step "update: a new version; the next request carries the new value"
code=$(jpost "$ABX_API_URL/secrets/$sid" "{\"value\":\"$v2\"}")
[ "$code" = 200 ] && [ "$(field currentVersion)" = 2 ] && [ "$(field metadata env)" = test ] ||
  fail "update: $code $(cat "$work/body")"
code=$(jpost "$ABX_API_URL/secrets/web-token" "{\"value\":\"$v2\",\"metadata\":{}}")
[ "$code" = 200 ] && [ "$(field currentVersion)" = 3 ] && [ "$(field metadata)" = "{}" ] ||
  fail "update by name: $code $(cat "$work/body")"
: >"$log"
got=$(scurl "$sb" "https://web.abx.test/two")
[ "$got" = "host=10 hosthdr=web.abx.test" ] || fail "curl after update: $got"
grep -q "hdr Authorization=Bearer $v2\$" "$log" || fail "server did not get v2: $(cat "$log")"
grep -q "$v1" "$log" && fail "the old value was sent after the update"

step "delete while a live sandbox's rules name it: 409 naming the sandbox"
code=$(api -X DELETE "$ABX_API_URL/secrets/$sid")
[ "$code" = 409 ] && grep -q "$sb" "$work/body" || fail "delete in use: $code $(cat "$work/body")"
code=$(api -X PUT -H 'Content-Type: application/json' \
  -d '{"rules":{"web.abx.test":[{"transform":{"headers":{"X-K":"${e2b.secrets.gone}"}}}]}}' \
  "$ABX_API_URL/sandboxes/$sb/network")
[ "$code" = 400 ] && grep -q 'rules\[\\"web.abx.test\\"\]\[0\].transform.headers\[\\"X-K\\"\]: secret .gone. not found' "$work/body" ||
  fail "PUT missing: $code $(cat "$work/body")"

step "restart: the value still opens (secrets.key), and is not in abx.db"
kill -KILL "$abxd_pid"; wait "$abxd_pid" 2>/dev/null || true
start_abxd
: >"$log"
got=$(scurl "$sb" "https://web.abx.test/three")
grep -q "hdr Authorization=Bearer $v2\$" "$log" || fail "after restart: $got $(cat "$log")"
[ "$(stat -c %a "$work/home/secrets.key")" = 400 ] || fail "secrets.key mode"
for f in "$work"/home/abx.db*; do
  grep -qa "$v1\|$v2" "$f" && fail "a value in $f"
done

step "the values are nowhere in the sandbox, the answers, the audit or abxd's log"
for v in "$v1" "$v2"; do
  got=$(sx "$sb" "p=${v:0:6}; p=\${p}${v:6}; grep -rlsa -D skip --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev \"\$p\" / | head -3; for e in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do grep -lsa \"\$p\" \$e; done; echo scanned")
  [ "$got" = scanned ] || fail "the value is inside the sandbox: $got"
done
code=$(api "$ABX_API_URL/sandboxes/$sb/network/audit")
grep -q '"verdict":"transform"' "$work/body" || fail "no transform in the audit"
grep -rlq "$v1\|$v2" "$work/answers" && fail "a value in an answer: $(grep -rl "$v1\|$v2" "$work/answers")"
grep -q "$v1\|$v2" "$work/abxd.log" && fail "a value in abxd's log"

step "a secret gone behind the API's back: the request is refused (502), never sent without it"
# The API refuses to delete a secret a live sandbox's rules name, so this removes one from abxd's
# store directly (sqlite3, when the machine has it), as a lost or edited abx.db would.
jpost "$ABX_API_URL/secrets" '{"name":"short-lived","value":"v"}' >/dev/null
code=$(api -X PUT -H 'Content-Type: application/json' \
  -d '{"rules":{"web.abx.test":[{"transform":{"headers":{"Authorization":"Bearer ${e2b.secrets.short-lived}"}}}]}}' \
  "$ABX_API_URL/sandboxes/$sb/network")
[ "$code" = 204 ] || fail "PUT: $code $(cat "$work/body")"
code=$(api -X DELETE "$ABX_API_URL/secrets/short-lived")
[ "$code" = 409 ] || fail "delete short-lived in use: $code"
if command -v sqlite3 >/dev/null; then
  sqlite3 "$work/home/abx.db" "DELETE FROM secrets WHERE name = 'short-lived'" || fail "sqlite3"
  : >"$log"
  got=$(sx "$sb" "curl -s --max-time 6 -o /dev/null -w '%{http_code}' https://web.abx.test/gone")
  [ "$got" = 502 ] || fail "a request naming a gone secret: $got"
  grep -q gone "$log" && fail "the request went out without its secret"
  code=$(api "$ABX_API_URL/sandboxes/$sb/network/audit")
  grep -q "secret 'short-lived' not found" "$work/body" || fail "audit of the refusal: $(cat "$work/body")"
else
  step "(no sqlite3 on this machine: the gone-secret refusal not tried)"
fi

step "kill the sandbox; then delete: 204, and it is gone"
abx sandbox kill "$sb" >/dev/null || fail "kill"
code=$(api -X DELETE "$ABX_API_URL/secrets/$sid")
[ "$code" = 204 ] || fail "delete: $code $(cat "$work/body")"
code=$(api "$ABX_API_URL/secrets/$sid")
[ "$code" = 404 ] || fail "after delete: $code"
step "ok"

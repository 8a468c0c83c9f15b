#!/usr/bin/env bash
# E2B's network.rules end to end (issue 40; docs/networking.md "Credentials that never enter
# the sandbox"): a real abxd, real sandboxes of the base image, and the test's own internet
# (internet.sh: HTTPS servers signed by the run's test CA, which abxd is told to trust with
# --egress-extra-ca; the sandboxes are not). The servers log the Authorization and X-Test-*
# headers they receive (servers.py), on the host, never in a response.
#
# Proves: curl (HTTPS and HTTP) and Python's urllib in a sandbox reach the server with the
# injected header and trust abxd's CA without any step of their own; a header the sandbox sent
# is replaced; none when the sandbox picks the name's address itself; a wildcard; an exact key beats a wildcard; a live update applies to the next
# request; a forged Host is refused (421) and never forwarded; a bad upstream certificate is a
# TLS failure inside the sandbox, not a bypass; the value is nowhere in the sandbox (its files,
# every process's environment), in GET /sandboxes/{id}, in the audit, or in abxd's log; the
# audit records each injection by header name; rules for hosts a sandbox cannot reach are
# accepted with a warning; bad rules are a 400 naming the field; rules survive an abxd restart.
# ctest passes ABXD_BIN, ABX_CLI_BIN, ABX_IMAGE_STORE and ABX_INET_INDEX. Needs root.
set -euo pipefail
label="rules e2e"
idx="${ABX_INET_INDEX:-3}"
name="abxr$idx"
fail_details() { [ -n "${INET_DIR:-}" ] && { echo "--- https log"; tail -20 "$INET_DIR/https-$INET_WEB.log"; }; }
source "$(dirname "${BASH_SOURCE[0]}")/fixture.sh"
# A name the test certificate does not cover (its SAN: abx.test, *.abx.test, *.wild.abx.test,
# *.other.test): the upstream for it presents a certificate for other names.
echo "badcert.test $INET_WEB" >>"$INET_DIR/zone"
abxd_flags=(--egress-extra-ca "$INET_CA")
start_abxd
log="$INET_DIR/https-$INET_WEB.log"
hlog="$INET_DIR/http-$INET_WEB.log"
secret1="Bearer s1-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
secret2="Bearer s2-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"

rules=$(python3 - "$secret1" <<'PY'
import json, sys
h = lambda **kv: [{"transform": {"headers": kv}}]
print(json.dumps({"templateID": "base", "timeout": 600, "network": {"rules": {
    "web.abx.test": [{"transform": {"headers": {"Authorization": sys.argv[1]}}}],
    "*.wild.abx.test": h(**{"X-Test-Key": "wild"}),
    "v.wild.abx.test": h(**{"X-Test-Key": "exact"}),
    "badcert.test": h(**{"X-Test-Key": "never"})}}}))
PY
)

step "create with network.rules: no warnings, GET masks the values"
code=$(api -X POST -H 'Content-Type: application/json' -d "$rules" "$ABX_API_URL/sandboxes")
[ "$code" = 201 ] || fail "create: $code $(cat "$work/body")"
! grep -q warnings "$work/body" || fail "warnings for reachable hosts: $(cat "$work/body")"
sb=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sandboxID"])' "$work/body")
api "$ABX_API_URL/sandboxes/$sb" >/dev/null
grep -q '"rules":{"web.abx.test":\[{"transform":{"headers":{"Authorization":"\[redacted\]"}}}\]' \
  "$work/body" || fail "GET rules: $(cat "$work/body")"
grep -q "s1-" "$work/body" && fail "GET shows the value"

step "HTTPS: curl gets through with the injected header, its own replaced"
: >"$log"
got=$(scurl "$sb" "https://web.abx.test/")
[ "$got" = "host=10 hosthdr=web.abx.test" ] || fail "curl https: $got"
grep -q "hdr Authorization=$secret1\$" "$log" || fail "server did not see the header"
: >"$log"
got=$(scurl "$sb" "-H 'Authorization: Bearer from-the-sandbox' https://web.abx.test/x")
[ "$got" = "host=10 hosthdr=web.abx.test" ] || fail "curl https with its own header: $got"
[ "$(grep -c "hdr Authorization=" "$log")" = 1 ] && grep -q "hdr Authorization=$secret1\$" "$log" ||
  fail "the sandbox's Authorization was not replaced: $(cat "$log")"
: >"$log"
got=$(sx "$sb" "python3 -c \"import urllib.request;print(urllib.request.urlopen('https://web.abx.test/py',timeout=6).read().decode().strip())\"")
[ "$got" = "host=10 hosthdr=web.abx.test" ] || fail "python urllib: $got"
grep -q "hdr Authorization=$secret1\$" "$log" || fail "urllib's request had no header"
if sx "$sb" "command -v node" | grep -q node; then
  got=$(sx "$sb" "node -e \"fetch('https://web.abx.test/node').then(r=>r.text()).then(t=>console.log(t.trim()))\"")
  [ "$got" = "host=10 hosthdr=web.abx.test" ] || fail "node fetch: $got"
else
  step "(no node in the base image: node fetch not tried)"
fi

step "plain HTTP too"
: >"$hlog"
got=$(scurl "$sb" "http://web.abx.test/plain")
[ "$got" = "host=10 hosthdr=web.abx.test" ] || fail "curl http: $got"
grep -q "hdr Authorization=$secret1\$" "$hlog" || fail "http: no header: $(cat "$hlog")"

step "an address the sandbox chose for the name: no credential (HTTP: relayed without it)"
log2="$INET_DIR/http-$INET_WEB2.log"
: >"$log2"
got=$(scurl "$sb" "--resolve web.abx.test:80:$INET_WEB2 http://web.abx.test/chosen")
[ "$got" = "host=20 hosthdr=web.abx.test" ] || fail "open sandbox to its chosen address: $got"
grep -q chosen "$log2" || fail "the request did not reach .20: $(cat "$log2")"
grep -q "hdr Authorization" "$log2" && fail "the credential went to an address the sandbox chose"
: >"$INET_DIR/https-$INET_WEB2.log"
got=$(scurl "$sb" "--resolve web.abx.test:443:$INET_WEB2 https://web.abx.test/chosen")
[ "$got" = "FAILED 60" ] || fail "HTTPS to a chosen address should not be intercepted: $got"
grep -q "hdr Authorization" "$INET_DIR/https-$INET_WEB2.log" && fail "credential over HTTPS to .20"

step "wildcard and precedence: exact beats the wildcard; the apex is not matched"
: >"$log"
got=$(scurl "$sb" "https://a.wild.abx.test/")  # (any depth: the test certificate covers one)
[ "$got" = "host=10 hosthdr=a.wild.abx.test" ] || fail "wildcard: $got"
grep -q "hdr X-Test-Key=wild\$" "$log" || fail "wildcard header: $(cat "$log")"
: >"$log"
got=$(scurl "$sb" "https://v.wild.abx.test/")
[ "$got" = "host=10 hosthdr=v.wild.abx.test" ] || fail "exact: $got"
grep -q "hdr X-Test-Key=exact\$" "$log" && ! grep -q "X-Test-Key=wild" "$log" ||
  fail "exact did not win: $(cat "$log")"
# Unmatched HTTPS is not intercepted: the upstream's own certificate reaches the sandbox, which
# does not trust the test CA.
got=$(scurl "$sb" "https://other.abx.test/")
[[ "$got" == "FAILED 60" ]] || fail "unmatched HTTPS should be the server's own certificate: $got"

step "forged Host: refused, never forwarded"
: >"$log"
got=$(sx "$sb" "curl -s --max-time 6 -o /dev/null -w '%{http_code}' -H 'Host: other.abx.test' https://web.abx.test/forged")
[ "$got" = 421 ] || fail "forged Host: $got"
grep -q forged "$log" && fail "the forged request reached the server: $(cat "$log")"
got=$(sx "$sb" "curl -s --max-time 6 -o /dev/null -w '%{http_code}' --resolve other.abx.test:443:$INET_WEB --connect-to other.abx.test:443:web.abx.test:443 https://other.abx.test/")
[ "$got" != 200 ] || fail "a connection to web.abx.test carried other.abx.test"

step "bad upstream certificate: a TLS failure in the sandbox, not a bypass"
: >"$log"
got=$(scurl "$sb" "https://badcert.test/")
[[ "$got" == FAILED* ]] || fail "bad upstream certificate: $got"
grep -q "X-Test-Key=never" "$log" && fail "a request went to the bad upstream"
grep -q "GET" "$log" && fail "a request reached the bad upstream: $(cat "$log")"

step "live update: PUT replaces the rules; the next request gets the new value"
body=$(python3 -c 'import json,sys; print(json.dumps({"rules":{"web.abx.test":[{"transform":{"headers":{"Authorization":sys.argv[1]}}}]}}))' "$secret2")
code=$(api -X PUT -H 'Content-Type: application/json' -d "$body" "$ABX_API_URL/sandboxes/$sb/network")
[ "$code" = 204 ] || fail "PUT: $code $(cat "$work/body")"
: >"$log"
got=$(scurl "$sb" "https://web.abx.test/" "https://v.wild.abx.test/")
grep -q "hdr Authorization=$secret2\$" "$log" || fail "after PUT: $(cat "$log")"
grep -q "X-Test-Key" "$log" && fail "the replaced rule set still applies: $(cat "$log")"

step "the values are nowhere in the sandbox, GET, the audit or abxd's log"
# `inside <value>`: the files and process environments/command lines inside the sandbox that
# hold it, then "scanned". The pattern is built inside, so that no command line holds it.
inside() {
  local v=$1
  sx "$sb" "p=${v:0:6}; p=\${p}${v:6}; grep -rlsa -D skip --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev \"\$p\" / | head -3; for e in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do grep -lsa \"\$p\" \$e; done; echo scanned"
}
canary="canary-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
echo "$canary" | abx files write "$sb" /tmp/canary.txt >/dev/null || fail "write the canary"
inside "$canary" | grep -q "^/tmp/canary.txt$" || fail "the scan does not find a planted value"
for s in "$secret1" "$secret2"; do
  got=$(inside "${s#Bearer }")
  [ "$got" = scanned ] || fail "the value is inside the sandbox: $got"
done
api "$ABX_API_URL/sandboxes/$sb/network/audit" >/dev/null
grep -q '"verdict":"transform"' "$work/body" || fail "no transform in the audit: $(cat "$work/body")"
python3 - "$work/body" <<'PY' || fail "audit: $(cat "$work/body")"
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["events"] if e["verdict"] == "transform"]
ok = any(e["domain"] == "web.abx.test" and e["rule"] == "web.abx.test" and
         e["headers"] == ["Authorization"] and e["status"] == 200 and e["protocol"] == "https"
         for e in ev)
http = any(e["protocol"] == "http" and e["headers"] == ["Authorization"] for e in ev)
wild = any(e["domain"] == "a.wild.abx.test" and e["rule"] == "*.wild.abx.test" for e in ev)
forged = any(e["domain"] == "other.abx.test" and e["status"] == 0 and
             "Host differs" in e.get("reason", "") for e in ev)
bad = any(e["domain"] == "badcert.test" and "upstream TLS" in e.get("reason", "") for e in ev)
sys.exit(0 if ok and http and wild and forged and bad else 1)
PY
grep -q 's1-\|s2-' "$work/body" && fail "a value in the audit"
grep -q "${secret1#Bearer }\|${secret2#Bearer }" "$work/abxd.log" && fail "a value in abxd's log"
got=$(sx "$sb" "echo \$SSL_CERT_FILE \$REQUESTS_CA_BUNDLE \$NODE_EXTRA_CA_CERTS; grep -c 'BEGIN CERT' /usr/local/share/ca-certificates/abx-egress-ca.crt")
[ "$got" = "/etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt /usr/local/share/ca-certificates/abx-egress-ca.crt
1" ] || fail "CA environment: $got"
# abxd's CA key: no piece of it anywhere inside (16 base64 characters of the private scalar:
# the PKCS#8 line starts with 48 characters every P-256 key shares; split as above).
keyline=$(sed -n 2p "$work/home/ca/ca.key")
[ ${#keyline} -ge 64 ] || fail "ca.key: $(wc -c <"$work/home/ca/ca.key") bytes"
got=$(sx "$sb" "p=${keyline:48:8}; p=\${p}${keyline:56:8}; grep -rlsa -D skip --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -F \"\$p\" / | head -3; echo scanned")
[ "$got" = scanned ] || fail "abxd's CA key is inside the sandbox: $got"
[ "$(stat -c %a "$work/home/ca/ca.key")" = 400 ] || fail "ca.key mode $(stat -c %a "$work/home/ca/ca.key")"

step "warnings: a rule for a host the sandbox may not reach is kept and reported"
code=$(api -X POST -H 'Content-Type: application/json' \
  -d '{"templateID":"base","timeout":600,"network":{"denyOut":["0.0.0.0/0"],"allowOut":["web.abx.test"],"rules":{"other.abx.test":[{"transform":{"headers":{"X-Test-Key":"w"}}}]}}}' \
  "$ABX_API_URL/sandboxes")
[ "$code" = 201 ] || fail "create with an unreachable rule: $code $(cat "$work/body")"
grep -q '"warnings":\["network.rules\[\\"other.abx.test\\"\]' "$work/body" || fail "warnings: $(cat "$work/body")"
warned=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sandboxID"])' "$work/body")
code=$(api -X PUT -H 'Content-Type: application/json' \
  -d '{"denyOut":["0.0.0.0/0"],"rules":{"x.other.test":[]}}' "$ABX_API_URL/sandboxes/$warned/network")
[ "$code" = 200 ] && grep -q 'x.other.test' "$work/body" || fail "PUT warnings: $code $(cat "$work/body")"

step "bad rules: 400 naming the field"
for r in '{"*":[]}' '{"a.test":[{"transform":{"headers":{"":"v"}}}]}' \
  '{"a.test":[{"transform":{"headers":{"X":"a\r\nB: c"}}}]}' '{"a.test":[{"transform":{"headers":{"Host":"x"}}}]}'; do
  code=$(api -X PUT -H 'Content-Type: application/json' -d "{\"rules\":$r}" "$ABX_API_URL/sandboxes/$sb/network")
  [ "$code" = 400 ] && grep -q 'rules\[' "$work/body" || fail "rules $r: $code $(cat "$work/body")"
done

step "restart: rules are stored with the sandbox and applied again"
kill -KILL "$abxd_pid"; wait "$abxd_pid" 2>/dev/null || true
start_abxd
: >"$log"
got=$(scurl "$sb" "https://web.abx.test/again")
[ "$got" = "host=10 hosthdr=web.abx.test" ] || fail "after restart: $got"
grep -q "hdr Authorization=$secret2\$" "$log" || fail "after restart: $(cat "$log")"

for id in $sb $warned; do abx sandbox kill "$id" >/dev/null || fail "kill $id"; done
step "ok"

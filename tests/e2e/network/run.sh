#!/usr/bin/env bash
# Sandbox networking end to end (issue 13; docs/networking.md): a real abxd, real sandboxes of the
# base image, and the test's own internet (internet.sh: web hosts at 198.18.<i>.10 and .20 with
# HTTP, TLS and echo, a DNS server at .53, and a link-local 169.254.<i>.7 routed into it). abxd's
# resolver forwards to that DNS server only. Traffic goes nowhere else.
#
# Proves: default outbound access and DNS; allow/deny by CIDR (allow wins); domains by Host and
# SNI, bound to what the sandbox's resolver answered; DNS refused under deny-all (and the refused
# name never reaches the upstream); allowInternetAccess false; live updates; the always-blocked
# set (link-local even when allowed and routed, the host and abxd's API, another sandbox); the
# audit log; the ruleset itself; bad input; and that every sandbox is gone at the end.
# ctest passes ABXD_BIN, ABX_CLI_BIN, ABX_IMAGE_STORE and ABX_INET_INDEX. Needs root.
set -euo pipefail
label="network e2e"
idx="${ABX_INET_INDEX:-2}"
name="abxn$idx"
fail_details() {
  echo "--- warnings"; grep -E " (warn|error) " "$work/abxd.log" 2>/dev/null | tail -20
  # What the sandboxes' links were under: abxd's table and the run's DNS log.
  local table last
  table=$(sed -n 's/.*table inet \(abx_[0-9a-f]*\).*/\1/p' "$work/abxd.log" 2>/dev/null | head -1)
  [ -n "$table" ] && nft list table inet "$table" 2>/dev/null
  [ -f "${INET_DIR:-}/dns.log" ] && { echo "--- dns.log"; tail -20 "$INET_DIR/dns.log"; }
  # The last sandbox's audit: its resolver's and its proxy's decisions.
  last=$(cat "$work/last_id" 2>/dev/null || true)
  [ -n "$last" ] && { echo "--- audit of $last"; abx logs "$last" --network 2>&1 | tail -30; }
  return 0
}
source "$(dirname "${BASH_SOURCE[0]}")/fixture.sh"

# A template whose ports are reachable through abxd (for allowPublicTraffic).
mkdir -p "$work/home/templates/webby"
printf 'id: webby\ncapabilities: [shell, files, code, ports]\n' >"$work/home/templates/webby/template.yaml"

start_abxd
# curl from inside a sandbox; prints the body or "FAILED" (4 s, not the fixture's 6).
scurl() { local id=$1; shift; sx "$id" "curl -s --max-time 4 $* || echo FAILED"; }
ca_in=/tmp/ca.pem

create() {  # create <json body> -> id
  local code
  code=$(api -X POST -H 'Content-Type: application/json' -d "$1" "$ABX_API_URL/sandboxes")
  [ "$code" = 201 ] || fail "create $1: $code $(cat "$work/body")"
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sandboxID"])' "$work/body" |
    tee "$work/last_id"
}

step "default: outbound access and DNS through abxd's resolver"
open=$(create '{"templateID":"base","timeout":600}')
abx files write "$open" "$ca_in" <"$INET_CA" >/dev/null || fail "copy CA"
got=$(scurl "$open" "http://$INET_WEB/")
[ "$got" = "host=10 hosthdr=$INET_WEB" ] || fail "open sandbox to .10: $got"
got=$(sx "$open" "getent hosts web.abx.test")
echo "$got" | grep -q "^$INET_WEB " || fail "resolve web.abx.test: $got"
got=$(scurl "$open" "http://web.abx.test/")
[ "$got" = "host=10 hosthdr=web.abx.test" ] || fail "http by name: $got"
got=$(scurl "$open" "--cacert $ca_in https://web.abx.test/")
[ "$got" = "host=10 hosthdr=web.abx.test" ] || fail "https by name: $got"
got=$(sx "$open" "cat /etc/resolv.conf")
echo "$got" | grep -q "^nameserver 10.213.0.1" || fail "resolv.conf: $got"
# Naming another resolver (here .20, which serves no DNS) does not get around abxd's: the
# question is answered by abxd's resolver all the same.
got=$(sx "$open" "python3 -c \"import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.settimeout(3);q=bytes.fromhex('abcd01000001000000000000')+b'\\x03web\\x03abx\\x04test\\x00\\x00\\x01\\x00\\x01';s.sendto(q,('$INET_WEB2',53));print(len(s.recv(512)))\"")
[[ "$got" =~ ^[0-9]+$ ]] || fail "DNS to a named resolver should be answered by abxd: $got"

step "template builds: RUN steps reach the network (and its resolver) like sandboxes"
mkdir -p "$work/ctx"
printf 'FROM base\nRUN curl -sf http://web.abx.test/ >/fetched.txt\n' >"$work/ctx/Dockerfile"
abx template build -t netbuilt "$work/ctx" >"$work/build.out" 2>&1 ||
  fail "template build with a networked RUN: $(tail -5 "$work/build.out")"
built=$(abx sandbox create netbuilt 2>/dev/null) || fail "create from the built template"
got=$(sx "$built" "cat /fetched.txt")
[ "$got" = "host=10 hosthdr=web.abx.test" ] || fail "what the RUN step fetched: $got"
got=$(sx "$built" "cat /etc/resolv.conf")
echo "$got" | grep -q "nameserver 10.213.0.1" || fail "resolv.conf in a built sandbox: $got"
abx sandbox kill "$built" >/dev/null || fail "kill the built sandbox"

step "allow/deny by CIDR: allow wins over deny"
cidr=$(create "{\"templateID\":\"base\",\"timeout\":600,\"network\":{\"denyOut\":[\"0.0.0.0/0\"],\"allowOut\":[\"$INET_WEB\"]}}")
got=$(scurl "$cidr" "http://$INET_WEB/")
[ "$got" = "host=10 hosthdr=$INET_WEB" ] || fail "allowed .10: $got"
: >"$INET_DIR/http-$INET_WEB2.log"
got=$(scurl "$cidr" "http://$INET_WEB2/")
[ "$got" = FAILED ] || fail "denied .20 answered: $got"
got=$(sx "$cidr" "echo hi | timeout 4 python3 -c \"import socket;s=socket.create_connection(('$INET_WEB2',7),3);s.sendall(b'x');print(s.recv(9))\" || echo FAILED")
echo "$got" | grep -q FAILED || fail "denied .20:7 answered: $got"
[ ! -s "$INET_DIR/http-$INET_WEB2.log" ] || fail "a denied request reached .20"
partial=$(create "{\"templateID\":\"base\",\"timeout\":600,\"network\":{\"denyOut\":[\"$INET_WEB2/32\"]}}")
got=$(scurl "$partial" "http://$INET_WEB/")
[ "$got" = "host=10 hosthdr=$INET_WEB" ] || fail "deny-list sandbox to .10: $got"
got=$(scurl "$partial" "http://$INET_WEB2/")
[ "$got" = FAILED ] || fail "deny-list sandbox reached .20: $got"

step "domains: Host and SNI, bound to the resolver's answers; DNS refused under deny-all"
dom=$(create '{"templateID":"base","timeout":600,"network":{"denyOut":["0.0.0.0/0"],"allowOut":["web.abx.test","*.wild.abx.test"]}}')
abx files write "$dom" "$ca_in" <"$INET_CA" >/dev/null || fail "copy CA"
got=$(scurl "$dom" "http://web.abx.test/")
[ "$got" = "host=10 hosthdr=web.abx.test" ] || fail "allowed domain over http: $got"
got=$(scurl "$dom" "--cacert $ca_in https://web.abx.test/")
[ "$got" = "host=10 hosthdr=web.abx.test" ] || fail "allowed domain over https: $got"
got=$(scurl "$dom" "--cacert $ca_in https://a.wild.abx.test/")
[ "$got" = "host=10 hosthdr=a.wild.abx.test" ] || fail "wildcard domain over https: $got"
: >"$INET_DIR/dns.log"
got=$(sx "$dom" "getent hosts other.abx.test || echo UNRESOLVED")
echo "$got" | grep -q UNRESOLVED || fail "other.abx.test resolved under deny-all: $got"
got=$(sx "$dom" "getent hosts secret-data.evil.other.test || echo UNRESOLVED")
echo "$got" | grep -q UNRESOLVED || fail "exfiltration name resolved: $got"
if grep -q "other.abx.test\|evil.other.test" "$INET_DIR/dns.log"; then
  fail "a refused name reached the upstream: $(cat "$INET_DIR/dns.log")"
fi
# An allowed name pointed at an address the resolver never gave: refused by the proxy.
: >"$INET_DIR/http-$INET_WEB2.log"
: >"$INET_DIR/https-$INET_WEB2.log"
got=$(scurl "$dom" "--resolve web.abx.test:80:$INET_WEB2 http://web.abx.test/")
[ "$got" != "host=20 hosthdr=web.abx.test" ] || fail "allowed Host to an unbound address passed"
got=$(scurl "$dom" "--cacert $ca_in --resolve web.abx.test:443:$INET_WEB2 https://web.abx.test/")
[ "$got" != "host=20 hosthdr=web.abx.test" ] || fail "allowed SNI to an unbound address passed"
got=$(scurl "$dom" "-H 'Host: web.abx.test' http://$INET_WEB2/")
[ "$got" != "host=20 hosthdr=web.abx.test" ] || fail "Host header to an unbound address passed"
grep -q "GET" "$INET_DIR/http-$INET_WEB2.log" "$INET_DIR/https-$INET_WEB2.log" &&
  fail "an unbound request reached .20"
# Other ports are matched by address only: the allowed name's address on port 7 is denied.
got=$(sx "$dom" "timeout 4 python3 -c \"import socket;s=socket.create_connection(('$INET_WEB',7),3);s.sendall(b'x');print(s.recv(9))\" || echo FAILED")
echo "$got" | grep -q FAILED || fail "port 7 of an allowed domain's address answered: $got"

step "allowInternetAccess: false"
none=$(create '{"templateID":"base","timeout":600,"allowInternetAccess":false}')
got=$(scurl "$none" "http://$INET_WEB/")
[ "$got" = FAILED ] || fail "no-internet sandbox reached .10: $got"
got=$(sx "$none" "getent hosts web.abx.test || echo UNRESOLVED")
echo "$got" | grep -q UNRESOLVED || fail "no-internet sandbox resolved: $got"
code=$(api "$ABX_API_URL/sandboxes/$none")
grep -q '"allowInternetAccess":false' "$work/body" || fail "GET shows: $(cat "$work/body")"
grep -q '"denyOut":\[\]' "$work/body" || fail "GET network: $(cat "$work/body")"

step "live update: PUT /sandboxes/{id}/network and abx sandbox network"
code=$(api -X PUT -H 'Content-Type: application/json' \
  -d "{\"allowOut\":[\"$INET_WEB2\"],\"denyOut\":[\"0.0.0.0/0\"]}" "$ABX_API_URL/sandboxes/$cidr/network")
[ "$code" = 204 ] || fail "PUT network: $code $(cat "$work/body")"
got=$(scurl "$cidr" "http://$INET_WEB2/")
[ "$got" = "host=20 hosthdr=$INET_WEB2" ] || fail ".20 after the update: $got"
got=$(scurl "$cidr" "http://$INET_WEB/")
[ "$got" = FAILED ] || fail ".10 after the update (no longer allowed): $got"
api "$ABX_API_URL/sandboxes/$cidr" >/dev/null
grep -q "\"allowOut\":\[\"$INET_WEB2\"\]" "$work/body" || fail "GET after PUT: $(cat "$work/body")"
abx sandbox info "$cidr" >"$work/info" || fail "abx sandbox info"
grep -q "^allowOut: *$INET_WEB2$" "$work/info" && grep -q "^denyOut: *0.0.0.0/0$" "$work/info" ||
  fail "abx sandbox info: $(cat "$work/info")"
abx sandbox network "$none" >/dev/null 2>&1 || fail "abx sandbox network (open everything)"
got=$(scurl "$none" "http://$INET_WEB/")
[ "$got" = "host=10 hosthdr=$INET_WEB" ] || fail "no-internet sandbox after opening: $got"

step "allowPublicTraffic false: the sandbox's ports need its trafficAccessToken; maskRequestHost"
code=$(api -X POST -H 'Content-Type: application/json' \
  -d '{"templateID":"webby","timeout":600,"network":{"allowPublicTraffic":false,"maskRequestHost":"masked-${PORT}.internal"}}' \
  "$ABX_API_URL/sandboxes")
[ "$code" = 201 ] || fail "create webby: $code $(cat "$work/body")"
priv=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sandboxID"])' "$work/body")
traffic=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["trafficAccessToken"])' "$work/body")
[ ${#traffic} -ge 32 ] || fail "no trafficAccessToken: $(cat "$work/body")"
# A service that answers with the Host header it was given (maskRequestHost replaces it).
abx files write "$priv" /tmp/host.py >/dev/null <<'PY' || fail "write host.py"
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("private-page host=" + self.headers.get("Host", "")).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("127.0.0.1", 8080), H).serve_forever()
PY
sx "$priv" "nohup python3 /tmp/host.py >/dev/null 2>&1 &" >/dev/null
port_req() { curl -sS -o "$work/body" -w '%{http_code}' -H "E2b-Sandbox-Id: $priv" -H "E2b-Sandbox-Port: 8080" "$@" "$ABX_API_URL/"; }
for _ in $(seq 50); do
  [ "$(port_req -H "e2b-traffic-access-token: $traffic")" = 200 ] && break
  sleep 0.2
done
[ "$(cat "$work/body")" = "private-page host=masked-8080.internal" ] ||
  fail "port 8080 with the traffic token (and the masked Host): $(cat "$work/body")"
code=$(port_req)
[ "$code" = 403 ] || fail "port 8080 without the traffic token: $code"
code=$(port_req -H "e2b-traffic-access-token: ${traffic}x")
[ "$code" = 403 ] || fail "port 8080 with a wrong traffic token: $code"
code=$(api -X PUT -H 'Content-Type: application/json' -d '{"allowPublicTraffic":true}' \
  "$ABX_API_URL/sandboxes/$priv/network")
[ "$code" = 400 ] || fail "allowPublicTraffic changed by an update: $code"
abx sandbox kill "$priv" >/dev/null || fail "kill webby"

step "always blocked: link-local (allowed and routed), the host, abxd, another sandbox"
ll=$(create "{\"templateID\":\"base\",\"timeout\":600,\"network\":{\"allowOut\":[\"169.254.0.0/16\",\"$INET_GW\",\"10.213.0.0/16\"]}}")
: >"$INET_DIR/http-$INET_LL.log"
got=$(scurl "$ll" "http://$INET_LL/")
[ "$got" = FAILED ] || fail "link-local answered: $got"
[ ! -s "$INET_DIR/http-$INET_LL.log" ] || fail "a request reached the link-local host"
curl -sS --max-time 4 "http://$INET_LL/" >/dev/null || fail "control: the host itself reaches $INET_LL"
got=$(scurl "$ll" "http://$INET_GW:$port/health")
[ "$got" = FAILED ] || fail "the host's address $INET_GW:$port answered: $got"
gw=$(sx "$ll" "ip route 2>/dev/null | sed -n 's/^default via \([0-9.]*\).*/\1/p'; awk '\$2==\"00000000\" {print \$3}' /proc/net/route")
gw_ip=$(echo "$gw" | grep -Eo '^[0-9]+(\.[0-9]+){3}$' | head -1 || true)
if [ -z "$gw_ip" ]; then
  hex=$(echo "$gw" | grep -Eo '^[0-9A-F]{8}$' | head -1)
  gw_ip=$(python3 -c "import socket,struct,sys; print(socket.inet_ntoa(struct.pack('<I', int(sys.argv[1],16))))" "$hex")
fi
got=$(scurl "$ll" "http://$gw_ip:$port/health")
[ "$got" = FAILED ] || fail "abxd's API on the gateway $gw_ip:$port answered: $got"
other_ip=$(sx "$open" "hostname -I 2>/dev/null || awk '/32 host/ {print f} {f=\$2}' /proc/net/fib_trie | grep -v '^127' | head -1")
other_ip=$(echo "$other_ip" | grep -Eo '10\.213\.[0-9]+\.[0-9]+' | head -1)
[ -n "$other_ip" ] || fail "no address for the open sandbox"
sx "$open" "nohup python3 -m http.server 8088 >/dev/null 2>&1 &" >/dev/null
sleep 1
got=$(scurl "$open" "http://127.0.0.1:8088/ -o /dev/null -w %{http_code}")
[ "$got" = 200 ] || fail "control: the open sandbox serves on 8088: $got"
got=$(scurl "$ll" "http://$other_ip:8088/")
[ "$got" = FAILED ] || fail "one sandbox reached another ($other_ip): $got"

step "audit: abx logs --network"
abx logs "$cidr" --network --json >"$work/audit" || fail "abx logs --network"
grep -q "\"destination\":\"$INET_WEB\".*\"verdict\":\"deny\"" "$work/audit" ||
  fail "no deny of .10 in the audit: $(cat "$work/audit")"
grep -q "\"destination\":\"$INET_WEB2\".*\"verdict\":\"allow\"" "$work/audit" ||
  fail "no allow of .20 in the audit: $(cat "$work/audit")"
abx logs "$dom" --network --json >"$work/audit-dom" || fail "abx logs --network (domains)"
grep -q '"domain":"web.abx.test".*"verdict":"allow"' "$work/audit-dom" ||
  fail "no allowed web.abx.test in the audit: $(cat "$work/audit-dom")"
grep -q '"protocol":"dns".*"domain":"other.abx.test".*"verdict":"deny"' "$work/audit-dom" ||
  fail "no refused DNS question in the audit: $(cat "$work/audit-dom")"
abx logs "$ll" --network --json >"$work/audit-ll" || fail "abx logs --network (blocked)"
grep -q "\"destination\":\"$INET_LL\".*\"verdict\":\"blocked\"" "$work/audit-ll" ||
  fail "no blocked link-local in the audit: $(cat "$work/audit-ll")"

step "restart: an abxd killed with -9 and started again re-applies every sandbox's rules"
kill -KILL "$abxd_pid"; wait "$abxd_pid" 2>/dev/null || true
start_abxd
got=$(scurl "$cidr" "http://$INET_WEB2/")
[ "$got" = "host=20 hosthdr=$INET_WEB2" ] || fail ".20 after the restart: $got"
got=$(scurl "$cidr" "http://$INET_WEB/")
[ "$got" = FAILED ] || fail ".10 after the restart (its rules deny it): $got"
got=$(scurl "$dom" "http://web.abx.test/")
[ "$got" = "host=10 hosthdr=web.abx.test" ] || fail "domain sandbox after the restart: $got"

step "the ruleset"
table=$(sed -n 's/.*table inet \(abx_[0-9a-f]*\).*/\1/p' "$work/abxd.log" | head -1 || true)
[ -n "$table" ] || fail "abxd did not log its table"
nft list table inet "$table" >"$work/ruleset" || fail "nft list"
grep -q "169.254.0.0/16" "$work/ruleset" || fail "link-local not in the blocked set"
grep -q "masquerade" "$work/ruleset" || fail "no masquerade"
[ "$(grep -c 'chain sb_' "$work/ruleset")" -ge 6 ] || fail "fewer sandbox chains than sandboxes"

step "bad input"
for body in '{"network":{"allowOut":["10.0.0.1/33"]}}' '{"network":{"denyOut":["example.com"]}}' \
  '{"network":{"allowOut":["exa mple.com"]}}' '{"network":{"allowOut":"1.2.3.4"}}' \
  '{"allowInternetAccess":"no"}' '{"network":{"maskRequestHost":"a\r\nX-Evil: 1"}}'; do
  code=$(api -X POST -H 'Content-Type: application/json' -d "$body" "$ABX_API_URL/sandboxes")
  [ "$code" = 400 ] || fail "create $body: $code $(cat "$work/body")"
done
many=$(python3 -c 'import json; print(json.dumps({"allowOut": ["1.2.3.%d" % (i % 250) for i in range(1001)]}))')
code=$(api -X PUT -H 'Content-Type: application/json' -d "$many" "$ABX_API_URL/sandboxes/$cidr/network")
[ "$code" = 400 ] || fail "1001 rules: $code"
code=$(api -X PUT -H 'Content-Type: application/json' -d '{"allowOut":["300.1.1.1"]}' \
  "$ABX_API_URL/sandboxes/$cidr/network")
[ "$code" = 400 ] || fail "bad update: $code"
got=$(scurl "$cidr" "http://$INET_WEB2/")  # the rules in force before the bad update still hold
[ "$got" = "host=20 hosthdr=$INET_WEB2" ] || fail "rules after a refused update: $got"
abx sandbox pause "$partial" >/dev/null 2>&1 || fail "pause"
code=$(api -X PUT -H 'Content-Type: application/json' -d '{}' "$ABX_API_URL/sandboxes/$partial/network")
[ "$code" = 409 ] || fail "update of a paused sandbox: $code"
abx sandbox kill "$partial" >/dev/null || fail "kill"
code=$(api -X PUT -H 'Content-Type: application/json' -d '{}' "$ABX_API_URL/sandboxes/$partial/network")
[ "$code" = 404 ] || fail "update of a dead sandbox: $code"

step "kill everything: links and chains go with the sandboxes"
for id in $open $cidr $dom $none $ll; do abx sandbox kill "$id" >/dev/null || fail "kill $id"; done
nft list table inet "$table" >"$work/ruleset-after"
! grep -q 'chain sb_' "$work/ruleset-after" || fail "sandbox chains left after kill"
step "ok"

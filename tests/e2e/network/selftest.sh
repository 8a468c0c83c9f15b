#!/usr/bin/env bash
# The network tests' private internet (internet.sh), checked from the host: HTTP to both web
# hosts, HTTPS with SNI against its CA, DNS over UDP and TCP (A, wildcard, CNAME, NXDOMAIN, a
# zone edit), the echo port, the routed link-local address, and that `down` leaves nothing: no
# namespace, no veth, no route, no server. Needs root.
#   selftest.sh [<index 1..200>]   (default: from the pid, so concurrent runs do not clash;
#                                   ctest passes one per test through ABX_INET_INDEX)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
inet="$here/internet.sh"
servers="$here/servers.py"

# 77: ctest's SKIP_RETURN_CODE, as the C++ e2e tests GTEST_SKIP without root.
if [ "$(id -u)" != 0 ]; then echo "selftest: needs root (netns); skipped" >&2; exit 77; fi
idx="${1:-${ABX_INET_INDEX:-$(( $$ % 200 + 1 ))}}"
name="inst$idx"
work="$(mktemp -d "${TMPDIR:-/tmp}/abx-inet.XXXXXX")"
cleanup() { "$inet" down "$name" "$idx" "$work" || true; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "selftest[$idx]: $*" >&2; exit 1; }
step() { echo "selftest[$idx]: $*"; }

out=$("$inet" up "$name" "$idx" "$work") || fail "up failed"
echo "$out"
eval "$out"
[ "$INET_WEB" = "198.18.$idx.10" ] && [ "$INET_WEB2" = "198.18.$idx.20" ] &&
  [ "$INET_DNS" = "198.18.$idx.53" ] && [ "$INET_LL" = "169.254.$idx.7" ] &&
  [ -s "$INET_CA" ] || fail "printed variables: $out"
for f in http-$INET_WEB.log https-$INET_WEB.log dns.log; do
  [ -f "$work/$f" ] && [ ! -s "$work/$f" ] || fail "$f should exist, empty after up"
done

step "http"
body=$(curl -sS --max-time 5 "http://$INET_WEB/some/path?q=1") || fail "curl http .10"
[ "$body" = "host=10 hosthdr=$INET_WEB" ] || fail "http .10 body: $body"
body=$(curl -sS --max-time 5 -H "Host: other.abx.test" -X POST -d x=1 "http://$INET_WEB2/p") ||
  fail "curl http .20"
[ "$body" = "host=20 hosthdr=other.abx.test" ] || fail "http .20 body: $body"
grep -q " connect$" "$work/http-$INET_WEB.log" || fail "http .10 connection not logged"
grep -q " GET /some/path?q=1 HTTP/1.1$" "$work/http-$INET_WEB.log" || fail "http .10 not logged"
grep -q " POST /p HTTP/1.1$" "$work/http-$INET_WEB2.log" || fail "http .20 not logged"
[ ! -s "$work/http-$INET_LL.log" ] || fail "link-local got a request nobody sent"

step "https"
body=$(curl -sS --max-time 5 --cacert "$INET_CA" --resolve "web.abx.test:443:$INET_WEB" \
  https://web.abx.test/tls) || fail "curl https web.abx.test"
[ "$body" = "host=10 hosthdr=web.abx.test" ] || fail "https body: $body"
body=$(curl -sS --max-time 5 --cacert "$INET_CA" --resolve "evil.other.test:443:$INET_WEB2" \
  https://evil.other.test/x) || fail "curl https evil.other.test"
[ "$body" = "host=20 hosthdr=evil.other.test" ] || fail "https .20 body: $body"
grep -q "sni=web.abx.test GET /tls HTTP/1.1$" "$work/https-$INET_WEB.log" ||
  fail "https SNI not logged: $(cat "$work/https-$INET_WEB.log")"
grep -q "sni=evil.other.test GET /x HTTP/1.1$" "$work/https-$INET_WEB2.log" || fail "https .20 log"
# A name outside the certificate fails verification (the CA is real, not accept-all).
if curl -sS --max-time 5 --cacert "$INET_CA" --resolve "example.com:443:$INET_WEB" \
    https://example.com/ >/dev/null 2>&1; then fail "certificate accepted for example.com"; fi

step "dns"
q() { python3 "$servers" query "$INET_DNS" "$@"; }
a=$(q web.abx.test) || fail "web.abx.test: $a"
[ "$a" = $'rcode=NOERROR\nA '"$INET_WEB" ] || fail "web.abx.test: $a"
a=$(q Other.Abx.Test. --tcp) || fail "other.abx.test tcp: $a"
[ "$a" = $'rcode=NOERROR\nA '"$INET_WEB2" ] || fail "other.abx.test tcp: $a"
a=$(q deep.er.wild.abx.test) && [ "$a" = $'rcode=NOERROR\nA '"$INET_WEB" ] || fail "wildcard: $a"
a=$(q cname.abx.test) &&
  [ "$a" = $'rcode=NOERROR\nCNAME web.abx.test\nA '"$INET_WEB" ] || fail "cname: $a"
a=$(q evil.other.test) && [ "$a" = $'rcode=NOERROR\nA '"$INET_WEB2" ] || fail "evil: $a"
rc=0; a=$(q nowhere.abx.test) || rc=$?
[ "$rc" = 3 ] && [ "$a" = "rcode=NXDOMAIN" ] || fail "nowhere.abx.test: rc=$rc $a"
a=$(q web.abx.test --type AAAA) && [ "$a" = "rcode=NOERROR" ] || fail "AAAA should be NODATA: $a"
echo "added.abx.test $INET_WEB2" >>"$work/zone"
a=$(q added.abx.test) && [ "$a" = $'rcode=NOERROR\nA '"$INET_WEB2" ] || fail "zone edit: $a"
for n in "web.abx.test A udp .* NOERROR" "other.abx.test A tcp" \
         "nowhere.abx.test A udp .* NXDOMAIN"; do
  grep -q "^$n" "$work/dns.log" || fail "dns.log lacks '$n': $(cat "$work/dns.log")"
done

step "echo"
e=$(python3 - "$INET_WEB" <<'EOF'
import socket, sys
with socket.create_connection((sys.argv[1], 7), timeout=5) as s:
    s.sendall(b"hello abx")
    print(s.recv(64).decode())
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
    u.settimeout(5)
    u.sendto(b"udp abx", (sys.argv[1], 7))
    print(u.recvfrom(64)[0].decode())
EOF
) || fail "echo"
[ "$e" = $'hello abx\nudp abx' ] || fail "echo answered: $e"
grep -q "tcp connect" "$work/echo-$INET_WEB.log" &&
  grep -q "udp 7 bytes" "$work/echo-$INET_WEB.log" || fail "echo not logged"

step "link-local (routed via the namespace)"
ip route show "$INET_LL/32" | grep -q "via 198.18.$idx.2 dev ${name}h" || fail "no link-local route"
body=$(curl -sS --max-time 5 "http://$INET_LL/meta") || fail "curl link-local"
[ "$body" = "host=ll hosthdr=$INET_LL" ] || fail "link-local body: $body"
grep -q " GET /meta " "$work/http-$INET_LL.log" || fail "link-local not logged"

step "down"
pids=$(cat "$work/pids")
"$inet" down "$name" "$idx" "$work" || fail "down failed"
"$inet" down "$name" "$idx" "$work" || fail "second down failed"
"$inet" down "$name" "$idx" || fail "down without workdir failed"
[ ! -e "/run/netns/$name" ] && ! ip netns list | awk '{print $1}' | grep -qx "$name" ||
  fail "namespace left"
! ip link show "${name}h" >/dev/null 2>&1 || fail "veth left"
[ -z "$(ip route show "198.18.$idx.0/24")" ] || fail "route 198.18.$idx.0/24 left"
[ -z "$(ip route show "$INET_LL/32")" ] || fail "link-local route left"
for p in $pids; do
  if [ -e "/proc/$p" ] && ! grep -q ') Z' "/proc/$p/stat" 2>/dev/null; then
    fail "server $p left"
  fi
done
# (Nothing is sent to 198.18.x now: without the veth that would follow the default route out.)
step "ok"

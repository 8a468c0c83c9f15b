#!/usr/bin/env bash
# E2B's network.rules over HTTP/2 end to end (issue 40; docs/networking.md "HTTP/2"): a real
# abxd, a real sandbox of the base image, and the test's own internet (internet.sh) plus an
# HTTPS server that speaks HTTP/2 only (h2server.mjs, Node's http2 module, started here inside
# the test's namespace on 198.18.<idx>.30 as h2.abx.test). The servers log the authorization and
# x-test-* fields they receive, on the host, never in a response.
#
# Proves, with curl inside the sandbox: `curl --http2` gets HTTP/2 from the proxy and the proxy
# speaks HTTP/2 upstream (the server reports the ALPN it saw), with the rule's header injected
# and a same-named header the sandbox sent replaced (one field, the rule's); several streams
# multiplexed on one connection each get it; a forged :authority is answered 421 and never
# forwarded, and so is a header block over the limits (431); bodies of megabytes stream both ways
# under flow control; response trailers, an upstream RST_STREAM and GOAWAY reach the sandbox; a
# stream the sandbox resets is reset upstream with its code while another stream of the same
# connection goes on; the sandbox's GOAWAY (sent by a few lines of Python: no client in the image
# sends one) reaches the upstream with its code; an upstream that speaks only HTTP/1.1 still works when
# the sandbox offered h2 (both legs fall back to HTTP/1.1); the audit has a transform event per
# stream; the value is not in the audit or abxd's log.
# ctest passes ABXD_BIN, ABX_CLI_BIN, ABX_IMAGE_STORE and ABX_INET_INDEX. Needs root.
set -euo pipefail
label="rules h2 e2e"
idx="${ABX_INET_INDEX:-11}"
name="abxh$idx"
fail_details() {
  [ -n "${INET_DIR:-}" ] || return 0
  echo "--- h2 server log"; tail -20 "$INET_DIR/h2.log" 2>/dev/null
  echo "--- h2 server output"; tail -5 "$INET_DIR/h2.out" 2>/dev/null
  echo "--- https log"; tail -10 "$INET_DIR/https-$INET_WEB.log"
  echo "--- abxd's egress h2 lines"; grep 'egress h2' "$work/abxd.log" | tail -10
}
source "$(dirname "${BASH_SOURCE[0]}")/fixture.sh"

# The HTTP/2 server: an address of the test's namespace, a name in its zone.
h2ip="${INET_WEB%.*}.30"
ip -n "$INET_NS" addr add "$h2ip/24" dev "${INET_NS}n" || fail "address $h2ip"
h2log="$INET_DIR/h2.log"
: >"$h2log"
ip netns exec "$INET_NS" node "$here/h2server.mjs" --bind "$h2ip" --cert "$INET_CA" \
  --key "$INET_DIR/key.pem" --log "$h2log" </dev/null >"$INET_DIR/h2.out" 2>&1 &
for _ in $(seq 100); do grep -q listening "$INET_DIR/h2.out" && break; sleep 0.1; done
grep -q listening "$INET_DIR/h2.out" || fail "h2server did not listen"
echo "h2.abx.test $h2ip" >>"$INET_DIR/zone"

abxd_flags=(--egress-extra-ca "$INET_CA")
start_abxd
hlog="$INET_DIR/https-$INET_WEB.log"
secret="Bearer h2-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
rules=$(python3 - "$secret" <<'PY'
import json, sys
h = {"transform": {"headers": {"Authorization": sys.argv[1], "X-Test-Key": "k1"}}}
print(json.dumps({"templateID": "base", "timeout": 600,
                  "network": {"rules": {"h2.abx.test": [h], "web.abx.test": [h]}}}))
PY
)
code=$(api -X POST -H 'Content-Type: application/json' -d "$rules" "$ABX_API_URL/sandboxes")
[ "$code" = 201 ] || fail "create: $code $(cat "$work/body")"
sb=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sandboxID"])' "$work/body")
# curl in the sandbox; -w adds what curl saw (` v=<HTTP version> s=<status>`).
h2curl() { sx "$sb" "curl -s --http2 --max-time 10 -w ' v=%{http_version} s=%{http_code}\n' $* || echo FAILED \$?"; }
auths() { grep -c "hdr authorization=" "$h2log" || true; }

step "curl --http2: HTTP/2 on both legs, the rule's header seen by the server"
: >"$h2log"
got=$(h2curl "https://h2.abx.test/one")
[[ "$got" == "host=30 authority=h2.abx.test proto=h2 conn="*" got=0"*" v=2 s=200" ]] ||
  fail "curl --http2: $got"
grep -q "conn=[0-9]* GET /one proto=h2 authority=h2.abx.test" "$h2log" || fail "log: $(cat "$h2log")"
grep -q "hdr authorization=$secret\$" "$h2log" && grep -q "hdr x-test-key=k1\$" "$h2log" ||
  fail "the server did not see the rule's headers: $(grep -c hdr "$h2log") header lines"

step "a header of the same name sent by the sandbox is replaced (any case)"
: >"$h2log"
got=$(h2curl "-H 'authorization: Bearer from-the-sandbox' -H 'X-TEST-KEY: mine' https://h2.abx.test/own")
[[ "$got" == *" v=2 s=200" ]] || fail "own header: $got"
[ "$(auths)" = 1 ] && grep -q "hdr authorization=$secret\$" "$h2log" ||
  fail "authorization not replaced: $(auths) fields"
[ "$(grep -c "hdr x-test-key=" "$h2log")" = 1 ] && grep -q "hdr x-test-key=k1\$" "$h2log" ||
  fail "x-test-key not replaced"

step "several streams multiplexed on one connection: each gets the header"
: >"$h2log"
got=$(sx "$sb" "curl -s --http2 -Z --max-time 10 -w '\nv=%{http_version} s=%{http_code}\n' https://h2.abx.test/m1 https://h2.abx.test/m2 https://h2.abx.test/m3 https://h2.abx.test/m4 https://h2.abx.test/m5 2>/dev/null | grep -c '^v=2 s=200\$'")
[ "$got" = 5 ] || fail "parallel: $got"
[ "$(grep -c ' GET /m[1-5] proto=h2' "$h2log")" = 5 ] || fail "streams: $(cat "$h2log")"
[ "$(grep ' GET /m[1-5] ' "$h2log" | sed 's/.*conn=\([0-9]*\).*/\1/' | sort -u | wc -l)" = 1 ] ||
  fail "the streams came on more than one upstream connection: $(grep ' GET /m' "$h2log")"
[ "$(auths)" = 5 ] || fail "each stream's header: $(auths) of 5"

step "forged :authority: 421 from the proxy, never forwarded"
: >"$h2log"
got=$(h2curl "-o /dev/null -H 'Host: other.abx.test' https://h2.abx.test/forged")
[ "$got" = " v=2 s=421" ] || fail "forged :authority: $got"
got=$(h2curl "-o /dev/null --connect-to other.abx.test:443:h2.abx.test:443 https://other.abx.test/forged2")
[[ "$got" != *"s=200"* ]] || fail "a connection to h2.abx.test carried other.abx.test: $got"
grep -q forged "$h2log" && fail "a forged request reached the server: $(cat "$h2log")"
# The connection stays usable for the right name after a refused stream.
: >"$h2log"
got=$(sx "$sb" "curl -s --http2 --max-time 10 -o /dev/null -w '%{http_code} %{num_connects}\n' -H 'Host: other.abx.test' https://h2.abx.test/forged3 --next --http2 --max-time 10 -o /dev/null -w '%{http_code} %{num_connects}\n' https://h2.abx.test/after")
[ "$(echo $got)" = "421 1 200 0" ] || fail "after a refused stream (status, new connections): $got"
grep -q "GET /after proto=h2" "$h2log" || fail "/after did not arrive"

step "a request header block over 64 KiB or 256 fields: 431 from the proxy, never forwarded"
: >"$h2log"
# 250 fields of 240 bytes: 68000 bytes counted RFC 9113's way (+32 a field), while curl's own
# nghttp2 still sends it (its bound on an encoded block is 64 KiB with ~11 bytes a field); then
# 300 fields of a few bytes.
big() {
  sx "$sb" "v=\$(head -c $2 /dev/zero | tr '\\0' a); set --; for i in \$(seq 100 $((99 + $1))); do set -- \"\$@\" -H \"x-big-\$i: \$v\"; done; curl -s --http2 --max-time 10 -o /dev/null -w 'v=%{http_version} s=%{http_code}\n' \"\$@\" https://h2.abx.test/big-header; echo rc=\$?"
}
got=$(big 250 231)
[ "$(echo $got)" = "v=2 s=431 rc=0" ] || fail "over 64 KiB of header: $got"
got=$(big 300 1)
[ "$(echo $got)" = "v=2 s=431 rc=0" ] || fail "over 256 header fields: $got"
got=$(big 100 1)
[ "$(echo $got)" = "v=2 s=200 rc=0" ] || fail "100 header fields: $got"
[ "$(grep -c big-header "$h2log")" = 1 ] || fail "an oversized request reached the server"

step "bodies both ways under flow control; trailers; an upstream reset"
got=$(sx "$sb" "head -c 3000000 /dev/urandom >/tmp/big && curl -s --http2 --max-time 30 --data-binary @/tmp/big -w ' v=%{http_version}\n' https://h2.abx.test/post")
[[ "$got" == *"got=3000000"*" v=2" ]] || fail "upload: $got"
got=$(sx "$sb" "curl -s --http2 --max-time 30 'https://h2.abx.test/big?n=5000000' | wc -c")
[ "$got" = 5000000 ] || fail "download: $got"
got=$(sx "$sb" "curl -sv --http2 --max-time 10 https://h2.abx.test/trailers 2>&1 | grep -ci 'x-test-trailer: t1'")
[ "$got" -ge 1 ] || fail "response trailers: $got"
got=$(sx "$sb" "curl -s --http2 --max-time 10 https://h2.abx.test/reset; echo rc=\$?")
[ "$got" = "rc=92" ] || fail "upstream RST_STREAM should be an HTTP/2 stream error (92): $got"

step "the upstream's GOAWAY reaches the sandbox: its next request takes a new connection"
: >"$h2log"
got=$(sx "$sb" "curl -s --http2 --max-time 10 -o /dev/null -w '%{http_code} %{num_connects}\n' https://h2.abx.test/goaway --next --http2 --max-time 10 -o /dev/null -w '%{http_code} %{num_connects}\n' https://h2.abx.test/after-goaway")
[ "$(echo $got)" = "200 1 200 1" ] || fail "after GOAWAY (status, new connections): $got"
[ "$(grep -E ' GET /(goaway|after-goaway) ' "$h2log" | sed 's/.*conn=\([0-9]*\).*/\1/' | sort -u | wc -l)" = 2 ] ||
  fail "both requests on one upstream connection: $(cat "$h2log")"

step "a stream the sandbox resets reaches the upstream as that stream's reset; the others go on"
: >"$h2log"
# Two streams on one connection: /slow, which curl gives up on after 2 s (RST_STREAM CANCEL),
# and a 5 MB download held to 1 MB/s, which is still running then and must finish.
got=$(sx "$sb" "curl -s --http2 -Z --max-time 2 -o /dev/null -w 'slow %{http_code} %{exitcode}\n' https://h2.abx.test/slow --next --http2 --max-time 20 --limit-rate 1M -o /dev/null -w 'big %{http_code} %{exitcode} %{size_download}\n' 'https://h2.abx.test/big?n=5000000' 2>/dev/null; echo rc=\$?")
[ "$(echo $got)" = "slow 200 28 big 200 0 5000000 rc=28" ] || fail "reset by the sandbox: $got"
# The upstream saw /slow reset with the sandbox's code (curl resets a stream it gives up on
# with STREAM_CLOSED, 5; the proxy passes the code on) on the connection /big came on, and /big
# was not reset: the reset was that stream's, not the connection's end.
slow_conn=$(sed -n 's/.*conn=\([0-9]*\) GET \/slow .*/\1/p' "$h2log")
[ -n "$slow_conn" ] && grep -q "conn=$slow_conn GET /big?n=5000000 " "$h2log" ||
  fail "the two streams were not on one upstream connection: $(grep ' GET ' "$h2log")"
grep -q "conn=$slow_conn rst /slow code=5\$" "$h2log" ||
  fail "the upstream did not see the sandbox's reset of /slow: $(grep -E 'rst|goaway' "$h2log")"
grep -q "rst /big" "$h2log" && fail "the download was reset too: $(grep rst "$h2log")"

step "the sandbox's GOAWAY reaches the upstream with its code"
# No h2 client in the base image sends a GOAWAY (curl closes the connection without one), so a
# few lines of Python speak the frames themselves: the preface and SETTINGS, one request (its
# header block HPACK literals without indexing), the answer read to its END_STREAM, then a
# GOAWAY with ENHANCE_YOUR_CALM (11), a code nothing else in this test sends.
abx files write "$sb" /tmp/goaway.py >/dev/null <<'PY' || fail "write goaway.py"
import socket, ssl, sys, time
ctx = ssl.create_default_context()  # the sandbox's bundle: it trusts abxd's CA
ctx.set_alpn_protocols(["h2"])
s = ctx.wrap_socket(socket.create_connection(("h2.abx.test", 443), 10), server_hostname="h2.abx.test")
if s.selected_alpn_protocol() != "h2":
    sys.exit("alpn: %s" % s.selected_alpn_protocol())
def frame(kind, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload
def literal(name, value):
    return b"\x00" + bytes([len(name)]) + name.encode() + bytes([len(value)]) + value.encode()
block = (literal(":method", "GET") + literal(":scheme", "https") + literal(":path", "/sandbox-goaway")
         + literal(":authority", "h2.abx.test"))
s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0) + frame(1, 0x5, 1, block))
buf, answered, deadline = b"", False, time.time() + 10
while not answered and time.time() < deadline:
    data = s.recv(65536)
    if not data:
        break
    buf += data
    while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
        n, kind, flags = int.from_bytes(buf[:3], "big"), buf[3], buf[4]
        stream = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
        if kind == 4 and not flags & 1:
            s.sendall(frame(4, 1, 0))  # SETTINGS ack
        if stream == 1 and kind in (0, 1) and flags & 1:
            answered = True
        buf = buf[9 + n:]
s.sendall(frame(7, 0, 0, (0).to_bytes(4, "big") + (11).to_bytes(4, "big")))  # no pushed stream
time.sleep(1)
print("answered" if answered else "no answer")
PY
: >"$h2log"
got=$(sx "$sb" "python3 /tmp/goaway.py")
[ "$got" = answered ] || fail "the raw h2 request: $got"
ga_conn=$(sed -n 's/.*conn=\([0-9]*\) GET \/sandbox-goaway .*/\1/p' "$h2log")
[ -n "$ga_conn" ] || fail "the raw request did not reach the upstream: $(cat "$h2log")"
for _ in $(seq 20); do grep -q "conn=$ga_conn goaway code=11\$" "$h2log" && break; sleep 0.1; done
grep -q "conn=$ga_conn goaway code=11\$" "$h2log" ||
  fail "the upstream did not see the sandbox's GOAWAY: $(grep -E 'rst|goaway|sandbox-goaway' "$h2log")"

step "an upstream that speaks only HTTP/1.1, the sandbox offering h2: HTTP/1.1 both legs"
: >"$hlog"
got=$(h2curl "https://web.abx.test/h1")
[ "$(echo $got)" = "host=10 hosthdr=web.abx.test v=1.1 s=200" ] || fail "h1 upstream: $got"
grep -q "hdr Authorization=$secret\$" "$hlog" || fail "h1 upstream: no header"

step "the audit: a transform event per stream, never a value"
api "$ABX_API_URL/sandboxes/$sb/network/audit" >/dev/null
python3 - "$work/body" <<'PY' || fail "audit: $(cat "$work/body")"
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["events"] if e["verdict"] == "transform"]
h2 = [e for e in ev if e["domain"] == "h2.abx.test"]
ok = [e for e in h2 if e["status"] == 200 and e["rule"] == "h2.abx.test" and
      e["headers"] == ["Authorization", "X-Test-Key"] and e["protocol"] == "https"]
forged = [e for e in ev if e["domain"] == "other.abx.test" and e["status"] == 0 and
          "Host differs" in e.get("reason", "")]
reset = [e for e in h2 if "upstream reset the stream" in e.get("reason", "")]
sandbox_reset = [e for e in h2 if "the sandbox reset the stream (STREAM_CLOSED)" in e.get("reason", "")]
# After the upstream's GOAWAY the sandbox was told too, so it sent no stream the proxy refused.
if any("GOAWAY" in e.get("reason", "") for e in ev):
    sys.exit(1)
# one, own, m1-m5, after, post, big, trailers: 11 answered streams
sys.exit(0 if len(ok) >= 11 and len(forged) >= 2 and reset and sandbox_reset else 1)
PY
grep -q "${secret#Bearer }" "$work/body" && fail "the value is in the audit"
grep -q "${secret#Bearer }" "$work/abxd.log" && fail "the value is in abxd's log"

abx sandbox kill "$sb" >/dev/null || fail "kill $sb"
step "ok"

#!/usr/bin/env bash
# network.rules benchmark (issue 40, "Speed"): what abxd's egress proxy adds when it injects a
# credential into a sandbox's HTTPS request, side by side in one run:
#   rule   the sandbox's rules hold `fast.abx.test: Authorization`; the request goes without the
#          header, the proxy terminates the sandbox's TLS (a leaf from abxd's CA), verifies the
#          upstream, sets the header and re-encrypts;
#   plain  the same sandbox, the same allowOut/denyOut, no rules; the client sets the header
#          itself; the proxy relays the TLS bytes by SNI (never decrypted): no interception.
# Three loads, each rule vs plain, rounds alternating which goes first:
#   1 connection kept alive: p50/p95 per request; aim: p50 added <= 1 ms;
#   1 connection, a new one per request (Connection: close): p50/p95, what each handshake costs;
#   16 connections kept alive: requests/s; aim: rule/plain >= 0.7x;
#   HTTP/2 (h2load): 4 connections x 16 concurrent streams, requests/s: through the rule both
#          legs are h2 (the proxy's nghttp2 relay); without, h2 end to end through the SNI relay;
# and the first request to a new name (a leaf minted) vs the second to it (the leaf cached),
# python3 inside the sandbox, a new connection each, after the DNS lookup; aim: <= 5 ms extra.
#
# The world is the test internet of tests/e2e/network/internet.sh (its own netns, 198.18.<i>.0/24)
# plus nginx on 198.18.<i>.30:443 in it (keep-alive, a 3-byte body, a certificate of this run's
# own CA that abxd is told to trust with --egress-extra-ca); abxd's sandbox resolver forwards to
# the test internet's DNS. No traffic leaves the machine. wrk (the host's binary: the base image
# has none) runs in the sandbox's network namespace (nsenter --net, with the sandbox's own
# resolv.conf bound in a private mount namespace), so its flows take the sandbox's path: its veth,
# abxd's ruleset, the resolver's bindings and the egress proxy. The python3 of the first-request
# measure runs inside the sandbox itself (abx exec), trusting abxd's CA as any program there does.
#
# Needs root, wrk, h2load and nginx (scripts/install-deps.sh's bench section) and the base image.
# Not a test: never run from .ci/run or ctest.
# Usage: bench/egress_rules.sh [--seconds S] [--rounds R] [--names N] [--abxd PATH] [--abx PATH]
#                              [--index I] [--wait-idle S] [--perf FILE]
# --perf FILE: `perf record -g` of abxd during each 16-connection run through the rule
# (FILE.1, FILE.2, ... per round): where the proxy's time goes.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
. "$here/lib/load.sh"

secs=${BENCH_SECONDS:-8}
rounds=${BENCH_ROUNDS:-3}
names=${BENCH_NAMES:-30}
idx=${BENCH_INET_INDEX:-151}
wait_idle=${BENCH_WAIT_IDLE:-0}
abxd=""; abx=""; perf_out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) secs=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --names) names=$2; shift ;;
    --abxd) abxd=$2; shift ;;
    --abx) abx=$2; shift ;;
    --index) idx=$2; shift ;;
    --wait-idle) wait_idle=$2; shift ;;
    --perf) perf_out=$2; shift ;;
    *) ;;
  esac
  shift
done
for d in build/release build/dev; do
  [ -z "$abxd" ] && [ -x "$root/$d/src/platform/abxd" ] && abxd="$root/$d/src/platform/abxd"
  [ -z "$abx" ] && [ -x "$root/$d/src/cli/abx" ] && abx="$root/$d/src/cli/abx"
done
[ -n "$abxd" ] && [ -n "$abx" ] || { echo "egress_rules bench: build abxd and abx first" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "egress_rules bench: needs root" >&2; exit 1; }
for t in wrk h2load nginx; do
  command -v "$t" >/dev/null || [ -x "/usr/sbin/$t" ] ||
    { echo "egress_rules bench: needs $t (scripts/install-deps.sh)" >&2; exit 1; }
done
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
store="${ABX_IMAGE_STORE:-$root/build/images}"

work="$(mktemp -d /tmp/abx-bench-rules.XXXXXX)"
chmod 755 "$work"
name="brul$idx"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  "$root/tests/e2e/network/internet.sh" down "$name" "$idx" "$work/inet" || true
  rm -rf "$work"
}
trap cleanup EXIT

eval "$("$root/tests/e2e/network/internet.sh" up "$name" "$idx" "$work/inet")"
fast="${INET_NET%.0/24}.30"
ip -n "$name" addr add "$fast/24" dev "${name}n"
cat >>"$INET_DIR/zone" <<EOF
fast.abx.test $fast
*.mint.abx.test $fast
EOF

# nginx: its own CA and a leaf (RSA 2048, as most public APIs still present) for the bench's names.
mkdir -p "$work/nginx/logs"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=abx bench CA" \
  -addext "basicConstraints=critical,CA:TRUE" -keyout "$work/ca.key" -out "$work/ca.pem" \
  >/dev/null 2>&1
openssl req -newkey rsa:2048 -nodes -subj "/CN=fast.abx.test" -keyout "$work/nginx/key.pem" \
  -out "$work/leaf.csr" >/dev/null 2>&1
printf 'subjectAltName=DNS:fast.abx.test,DNS:*.mint.abx.test\nbasicConstraints=CA:FALSE\n' \
  >"$work/leaf.ext"
openssl x509 -req -in "$work/leaf.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" \
  -CAcreateserial -days 2 -extfile "$work/leaf.ext" -out "$work/nginx/cert.pem" >/dev/null 2>&1
cat >"$work/nginx/nginx.conf" <<EOF
worker_processes 1;
pid $work/nginx/nginx.pid;
error_log $work/nginx/logs/error.log warn;
events { worker_connections 1024; }
http {
  log_format auth '\$http_authorization';
  access_log $work/nginx/logs/auth.log auth;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  server {
    listen $fast:443 ssl http2;
    ssl_certificate $work/nginx/cert.pem;
    ssl_certificate_key $work/nginx/key.pem;
    location / { return 200 "ok\n"; }
  }
}
EOF
ip netns exec "$name" "$nginx_bin" -p "$work/nginx" -c "$work/nginx/nginx.conf" \
  -g 'daemon off;' >"$work/nginx/out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -s --max-time 2 --cacert "$work/ca.pem" --resolve "fast.abx.test:443:$fast" \
    https://fast.abx.test/ >/dev/null 2>&1 && break
  sleep 0.1
done
curl -sf --max-time 2 --cacert "$work/ca.pem" --resolve "fast.abx.test:443:$fast" \
  https://fast.abx.test/ >/dev/null || { echo "nginx did not answer: $(cat "$work/nginx/out")" >&2; exit 1; }

home="$work/home"
"$abxd" --home "$home" --listen 127.0.0.1:0 --image-store "$store" --dns-upstream "$INET_DNS" \
  --egress-extra-ca "$work/ca.pem" --kill-sandboxes --log-level warn >"$work/abxd.log" 2>&1 &
abxd_pid=$!
pids+=($!)
url=""
for _ in $(seq 200); do
  port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/abxd.log" | head -1)
  [ -n "$port" ] && { url="http://127.0.0.1:$port"; break; }
  sleep 0.1
done
[ -n "$url" ] || { echo "abxd did not start: $(tail -3 "$work/abxd.log")" >&2; exit 1; }
key=$(cat "$home/api_key")
export ABX_API_URL="$url" ABX_API_KEY="$key" ABX_HOME="$work/client"

rule_value="Bearer rule-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
client_value="Bearer client-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
net_json() {  # net_json rule|plain: the sandbox's network (both: the same allowOut/denyOut)
  python3 - "$1" "$rule_value" <<'PY'
import json, sys
n = {"allowOut": ["fast.abx.test", "*.mint.abx.test"], "denyOut": ["0.0.0.0/0"]}
if sys.argv[1] == "rule":
    h = [{"transform": {"headers": {"Authorization": sys.argv[2]}}}]
    n["rules"] = {"fast.abx.test": h, "*.mint.abx.test": h}
print(json.dumps(n))
PY
}
out=$(curl -sS -H "X-API-KEY: $key" -H 'Content-Type: application/json' \
  -d "{\"templateID\":\"base\",\"timeout\":1200,\"network\":$(net_json plain)}" "$url/sandboxes")
sb=$(printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["sandboxID"])') ||
  { echo "create: $out" >&2; exit 1; }
init=$(cut -d' ' -f1 "$home/sandboxes/$sb/init")
set_rules() {  # set_rules rule|plain
  local code
  code=$(curl -sS -o "$work/put.out" -w '%{http_code}' -X PUT -H "X-API-KEY: $key" \
    -H 'Content-Type: application/json' -d "$(net_json "$1")" "$url/sandboxes/$sb/network")
  [ "$code" = 204 ] || { echo "PUT network ($1): $code $(cat "$work/put.out")" >&2; exit 1; }
}
# The client in the sandbox's network namespace, resolving with the sandbox's resolv.conf.
in_netns() {
  nsenter --net="/proc/$init/ns/net" -- unshare -m -- sh -c \
    'mount --bind "/proc/$0/root/etc/resolv.conf" /etc/resolv.conf && exec "$@"' "$init" "$@"
}

cat >"$work/report.lua" <<'EOF'
function done(s, l, r)
  io.write(string.format("WRKOUT %d %d %d %d %d\n", s.requests, s.duration, l:percentile(50),
    l:percentile(95), s.errors.status + s.errors.connect + s.errors.read + s.errors.write +
    s.errors.timeout))
end
EOF
auth_log="$work/nginx/logs/auth.log"
# run_wrk MODE CONNS CLOSE -> "requests/s p50_us p95_us"; checks the upstream saw the right header.
run_wrk() {
  local mode=$1 c=$2 close=$3 hdr=() o
  [ "$mode" = plain ] && hdr+=(-H "Authorization: $client_value")
  [ "$close" = 1 ] && hdr+=(-H "Connection: close")
  : >"$auth_log"
  o=$(in_netns wrk -t1 -c"$c" -d"${secs}s" --timeout 10s ${hdr[@]+"${hdr[@]}"} -s "$work/report.lua" \
    https://fast.abx.test/ 2>&1) || { echo "wrk: $o" >&2; exit 1; }
  read -r n dur p50 p95 errs <<<"$(printf '%s\n' "$o" | sed -n 's/^WRKOUT //p')"
  [ -n "${n:-}" ] && [ "$errs" = 0 ] && [ "$n" -gt 0 ] || { echo "wrk ($mode c$c): $o" >&2; exit 1; }
  local want=$client_value
  [ "$mode" = rule ] && want=$rule_value
  local seen
  seen=$(sort -u "$auth_log")
  [ "$seen" = "$want" ] ||
    { echo "upstream saw '$(head -c 80 <<<"$seen")', not the $mode value" >&2; exit 1; }
  python3 -c "print(f'{$n / ($dur / 1e6):.0f} $p50 $p95')"
}

# run_h2 MODE -> requests/s of h2load (HTTP/2: 4 connections, 16 streams each at once); checks
# that h2 was negotiated, nothing failed, and the upstream saw the right header.
run_h2() {
  local mode=$1 hdr=() o
  [ "$mode" = plain ] && hdr+=(-H "authorization: $client_value")
  : >"$auth_log"
  o=$(in_netns h2load -c 4 -m 16 -D "$secs" ${hdr[@]+"${hdr[@]}"} https://fast.abx.test/ 2>&1) ||
    { echo "h2load: $o" >&2; exit 1; }
  grep -q "Application protocol: h2" <<<"$o" || { echo "h2load ($mode): not h2: $o" >&2; exit 1; }
  grep -q " 0 failed, 0 errored" <<<"$o" || { echo "h2load ($mode): $o" >&2; exit 1; }
  local want=$client_value
  [ "$mode" = rule ] && want=$rule_value
  [ "$(sort -u "$auth_log")" = "$want" ] ||
    { echo "h2load ($mode): the upstream did not see the $mode value" >&2; exit 1; }
  sed -n 's/^finished in [0-9.]*s, \([0-9.]*\) req\/s.*/\1/p' <<<"$o"
}

# Warm up: the sandbox's names bound, a leaf for fast.abx.test minted, both paths once.
set_rules rule
run_wrk rule 1 0 >/dev/null
set_rules plain
run_wrk plain 1 0 >/dev/null
set_rules rule
run_h2 rule >/dev/null
set_rules plain

bench_wait_idle "$wait_idle"
load_before=$(bench_load)
declare -A res
for r in $(seq "$rounds"); do
  order="rule plain"
  [ $((r % 2)) = 0 ] && order="plain rule"
  for load in ka1 close1 ka16 h2; do
    for mode in $order; do
      set_rules "$mode"
      case $load in
        ka1) res[$load.$mode]+="$(run_wrk "$mode" 1 0)," ;;
        close1) res[$load.$mode]+="$(run_wrk "$mode" 1 1)," ;;
        h2) res[$load.$mode]+="$(run_h2 "$mode")," ;;
        ka16)
          perf_pid=""
          if [ -n "$perf_out" ] && [ "$mode" = rule ]; then
            perf record -q -g -F 999 -p "$abxd_pid" -o "$perf_out.$r" -- sleep "$secs" \
              >/dev/null 2>&1 &
            perf_pid=$!
          fi
          res[$load.$mode]+="$(run_wrk "$mode" 16 0),"
          [ -z "$perf_pid" ] || wait "$perf_pid" || true
          ;;
      esac
    done
  done
done

# First request to a new name vs the second to it, inside the sandbox (python3 of the base image,
# trusting abxd's CA as any program there does), each request on a new connection; timed from the
# connect to the end of the response, after the name was resolved (the binding the rule needs),
# so neither a process start nor the CA bundle's loading is in it; in microseconds.
set_rules rule
cat >"$work/first.py" <<'EOF'
import socket, ssl, sys, time
ctx = ssl.create_default_context()
n, tag = int(sys.argv[1]), sys.argv[2]
if len(sys.argv) > 3:  # without a rule the client meets nginx's own certificate: trust its CA
    ctx.load_verify_locations(sys.argv[3])
for i in range(n):
    name = f"n{i}-{tag}.mint.abx.test"
    addr = socket.getaddrinfo(name, 443, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    for k in ("first", "again"):
        t0 = time.perf_counter()
        s = ctx.wrap_socket(socket.create_connection((addr, 443), timeout=5), server_hostname=name)
        s.sendall(f"GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
        dt = time.perf_counter() - t0
        s.close()
        print(k, data.split(b" ", 2)[1].decode(), 0, f"{dt:.6f}")
EOF
"$abx" files write "$sb" /tmp/first.py <"$work/first.py" >/dev/null
"$abx" files write "$sb" /tmp/bench-ca.pem <"$work/ca.pem" >/dev/null
firsts=$("$abx" exec "$sb" -- python3 /tmp/first.py "$names" "r$$")
set_rules plain  # the same on other new names without a rule: the floor of a new connection
firsts_plain=$("$abx" exec "$sb" -- python3 /tmp/first.py "$names" "p$$" /tmp/bench-ca.pem)
load_after=$(bench_load)

python3 - "$rounds" "$secs" "$firsts_plain" "$firsts" \
  "${res[ka1.rule]}" "${res[ka1.plain]}" "${res[close1.rule]}" "${res[close1.plain]}" \
  "${res[ka16.rule]}" "${res[ka16.plain]}" "${res[h2.rule]}" "${res[h2.plain]}" \
  >"$work/summary" <<'PY'
import statistics, sys
rounds, secs, firsts_plain, firsts = sys.argv[1:5]
runs = [[tuple(map(float, x.split())) for x in a.strip(",").split(",")] for a in sys.argv[5:]]
med = lambda rs, i: statistics.median(r[i] for r in rs)
ka1r, ka1p, c1r, c1p, ka16r, ka16p, h2r, h2p = runs
def line(label, r, p):
    print(f"{label}: rule p50/p95 {med(r,1):.0f}/{med(r,2):.0f} us, plain {med(p,1):.0f}/{med(p,2):.0f} us,"
          f" p50 added {med(r,1)-med(p,1):.0f} us (per round: "
          + ", ".join(f"{a[1]-b[1]:.0f}" for a, b in zip(r, p)) + ")")
line("1 connection, kept alive", ka1r, ka1p)
line("1 connection, new per request", c1r, c1p)
print(f"16 connections, kept alive: rule {med(ka16r,0):.0f} req/s, plain {med(ka16p,0):.0f} req/s,"
      f" ratio {med(ka16r,0)/med(ka16p,0):.2f}x (per round: "
      + ", ".join(f"{a[0]/b[0]:.2f}" for a, b in zip(ka16r, ka16p)) + ")")
print(f"HTTP/2, 4 connections x 16 streams: rule {med(h2r,0):.0f} req/s, plain {med(h2p,0):.0f} req/s,"
      f" ratio {med(h2r,0)/med(h2p,0):.2f}x (per round: "
      + ", ".join(f"{a[0]/b[0]:.2f}" for a, b in zip(h2r, h2p)) + ")")
def times(text):
    first, again = [], []
    for l in text.splitlines():
        k, code, dns, total = l.split()
        if code != "200":
            sys.exit("first-request client: " + l)
        (first if k == "first" else again).append((float(total) - float(dns)) * 1e6)
    return first, again
first, again = times(firsts)
pfirst, pagain = times(firsts_plain)
ex = sorted(a - b for a, b in zip(first, again))
print(f"new name ({len(first)} names, python3 in the sandbox, a new connection each, after DNS):"
      f" rule: first p50 {statistics.median(first):.0f} us, second p50 {statistics.median(again):.0f} us,"
      f" first - second p50 {statistics.median(ex):.0f} us, p95 {ex[int(0.95*(len(ex)-1)+0.5)]:.0f} us;"
      f" without a rule: first p50 {statistics.median(pfirst):.0f} us, second p50 {statistics.median(pagain):.0f} us")
print(f"ROWS {med(ka1r,1):.0f} {med(ka1p,1):.0f} {med(c1r,1):.0f} {med(c1p,1):.0f} "
      f"{med(ka16r,0):.0f} {med(ka16p,0):.0f} {statistics.median(first):.0f} {statistics.median(again):.0f} "
      f"{med(h2r,0):.0f} {med(h2p,0):.0f}")
PY
echo "egress_rules bench: $(nproc) CPUs, load ${load_before} -> ${load_after}, abxd $abxd," \
  "$rounds rounds x ${secs} s per run (medians of the rounds)"
grep -v '^ROWS' "$work/summary"
read -r k1r k1p c1r c1p k16r k16p fr fa h2r h2p <<<"$(sed -n 's/^ROWS //p' "$work/summary")"
bench_row egress_rules "HTTPS request p50, 1 keep-alive connection, through a transform rule" \
  "$k1r" "header set by the sandbox (no interception)" "$k1p" us lower
bench_row egress_rules "HTTPS request p50, a new connection each, through a transform rule" \
  "$c1r" "header set by the sandbox (no interception)" "$c1p" us lower
bench_row egress_rules "HTTPS requests/s, 16 keep-alive connections, through a transform rule" \
  "$k16r" "header set by the sandbox (no interception)" "$k16p" req/s higher ">=0.7x"
bench_row egress_rules "HTTP/2 requests/s, 4 connections x 16 streams, through a transform rule" \
  "$h2r" "header set by the sandbox (h2 end to end, no interception)" "$h2p" req/s higher
bench_row egress_rules "first HTTPS request to a new name (leaf minted), p50 after DNS" \
  "$fr" "the second request to it (leaf cached)" "$fa" us lower
if awk -v a="$load_before" 'BEGIN {exit !(a > 1.0)}'; then
  echo "WARNING: the machine was busy (load $load_before): numbers are not comparable"
fi

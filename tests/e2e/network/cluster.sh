#!/usr/bin/env bash
# A cluster node's sandboxes cannot reach the cluster's other nodes (issue 43; docs/cluster.md,
# "Sandboxes cannot reach a node's internal API"): a real abxd with --cluster on a one-member
# etcd of the test's own (loopback), real sandboxes of the base image, and the test's own internet
# (internet.sh). A node record put into etcd names .20 of that internet as another node's
# apiUrl: within a renewal (--cluster-ttl 3: every second) no sandbox reaches .20 any more,
# directly or through the egress proxy (a sandbox whose rules name a domain of .20), while .10
# stays reachable; once the record is gone, .20 is reachable again. The other node is a record
# only: no second abxd runs. ctest passes ABXD_BIN, ABX_CLI_BIN, ABX_IMAGE_STORE, ABX_INET_INDEX.
# Needs root and etcd-server.
set -euo pipefail
label="cluster block e2e"
idx="${ABX_INET_INDEX:-12}"
name="abxc$idx"
etcd_bin="${ABX_ETCD_BIN:-/usr/bin/etcd}"
if [ ! -x "$etcd_bin" ]; then echo "$label: needs etcd-server ($etcd_bin); skipped" >&2; exit 77; fi
fail_details() {
  echo "--- cluster lines"; grep -E "cluster|block" "$work/abxd.log" 2>/dev/null | tail -20
  local table
  table=$(sed -n 's/.*table inet \(abx_[0-9a-f]*\).*/\1/p' "$work/abxd.log" 2>/dev/null | head -1)
  [ -n "$table" ] && nft list set inet "$table" blocked 2>/dev/null
  return 0
}
source "$(dirname "${BASH_SOURCE[0]}")/fixture.sh"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
client=$(free_port)
peer=$(free_port)
"$etcd_bin" --name e1 --data-dir "$work/etcd" \
  --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
  --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
  --initial-cluster "e1=http://127.0.0.1:$peer" >"$work/etcd.log" 2>&1 &
etcd_pid=$!
trap 'kill "$etcd_pid" 2>/dev/null || true; cleanup' EXIT
etcd_call() {  # etcd_call <path> <json>: etcd's JSON gateway
  curl -sS --max-time 5 -X POST -d "$2" "http://127.0.0.1:$client$1"
}
b64() { printf '%s' "$1" | base64 -w0; }
for _ in $(seq 100); do
  etcd_call /v3/kv/put "{\"key\":\"$(b64 probe)\",\"value\":\"$(b64 1)\"}" >/dev/null 2>&1 && break
  kill -0 "$etcd_pid" 2>/dev/null || fail "etcd exited: $(tail -5 "$work/etcd.log")"
  sleep 0.1
done

head -c 32 /dev/urandom | base64 >"$work/secret"
abxd_flags=(--cluster "127.0.0.1:$client" --node-name n1 --cluster-secret-file "$work/secret"
  --cluster-ttl 3 --advertise-url "http://127.0.0.1:9")
start_abxd
scurl() { local id=$1; shift; sx "$id" "curl -s --max-time 4 $* || echo FAILED"; }
create() {  # create <json body> -> id
  local code
  code=$(api -X POST -H 'Content-Type: application/json' -d "$1" "$ABX_API_URL/sandboxes")
  [ "$code" = 201 ] || fail "create $1: $code $(cat "$work/body")"
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sandboxID"])' "$work/body"
}
# Waits (up to 8 s: a few renewals) until `scurl <id> <url>` prints `want` (or anything else
# than it, with `!`).
wait_for() {
  local id=$1 url=$2 want=$3 got=""
  for _ in $(seq 16); do
    got=$(scurl "$id" "$url")
    if [ "${want:0:1}" = "!" ]; then [ "$got" != "${want:1}" ] && return 0
    else [ "$got" = "$want" ] && return 0; fi
    sleep 0.5
  done
  echo "$got"
  return 1
}

step "before: .20 is an ordinary address of the internet"
direct=$(create '{"templateID":"base","timeout":300}')
proxied=$(create '{"templateID":"base","timeout":300,"network":{"allowOut":["other.abx.test","web.abx.test"],"denyOut":["0.0.0.0/0"]}}')
got=$(scurl "$direct" "http://$INET_WEB2/")
[ "$got" = "host=20 hosthdr=$INET_WEB2" ] || fail "direct to .20 before: $got"
got=$(scurl "$proxied" "http://other.abx.test/")
[ "$got" = "host=20 hosthdr=other.abx.test" ] || fail "proxied to .20 before: $got"

step "another node registers with .20 as its apiUrl: no sandbox reaches it"
node2="{\"name\":\"n2\",\"apiUrl\":\"http://$INET_WEB2:80\",\"capacity\":1,\"sandboxes\":1,\"load\":0,\"updatedAt\":1}"
etcd_call /v3/kv/put "{\"key\":\"$(b64 /abx/nodes/n2)\",\"value\":\"$(b64 "$node2")\"}" >/dev/null ||
  fail "put the node record"
got=$(wait_for "$direct" "http://$INET_WEB2/" FAILED) || fail "direct to .20 while n2 is a node: $got"
got=$(scurl "$proxied" "http://other.abx.test/")
[ "$got" = FAILED ] || fail "proxied to .20 while n2 is a node: $got"
got=$(scurl "$direct" "http://$INET_WEB2:7/")
[ "$got" = FAILED ] || fail "another port of .20 while n2 is a node: $got"
fresh=$(create '{"templateID":"base","timeout":300}')
got=$(scurl "$fresh" "http://$INET_WEB2/")
[ "$got" = FAILED ] || fail "a sandbox created after n2 joined reached .20: $got"
# Nothing else is blocked: .10, directly and by an allowed name.
got=$(scurl "$direct" "http://$INET_WEB/")
[ "$got" = "host=10 hosthdr=$INET_WEB" ] || fail "direct to .10 while n2 is a node: $got"
got=$(scurl "$proxied" "http://web.abx.test/")
[ "$got" = "host=10 hosthdr=web.abx.test" ] || fail "proxied to .10 while n2 is a node: $got"
grep -q "blocking the cluster's other nodes for every sandbox: $INET_WEB2" "$work/abxd.log" ||
  fail "abxd did not log the block"

step "the node leaves: .20 is reachable again"
etcd_call /v3/kv/deleterange "{\"key\":\"$(b64 /abx/nodes/n2)\"}" >/dev/null || fail "delete the node record"
got=$(wait_for "$direct" "http://$INET_WEB2/" "host=20 hosthdr=$INET_WEB2") ||
  fail "direct to .20 after n2 left: $got"
got=$(scurl "$fresh" "http://$INET_WEB2/")
[ "$got" = "host=20 hosthdr=$INET_WEB2" ] || fail "the later sandbox to .20 after n2 left: $got"

for id in "$direct" "$proxied" "$fresh"; do
  code=$(api -X DELETE "$ABX_API_URL/sandboxes/$id")
  [ "$code" = 204 ] || fail "DELETE $id: $code"
done
step "passed"

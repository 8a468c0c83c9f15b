#!/usr/bin/env bash
# A private "internet" for the network e2e tests: a network namespace with web, TLS, echo and DNS
# servers behind a veth pair, reachable from the host (and so from sandboxes, through the
# daemon's NAT) and from nowhere else. Needs root. Traffic stays on the veth: nothing here touches
# the host's default route, resolv.conf or the uplink.
#
#   internet.sh up <name> <index> <workdir>
#   internet.sh down <name> <index> [<workdir>]
#
# <name>: the namespace, 1-10 of [A-Za-z0-9_-], unique per test (the host end of the veth is
#   <name>h, the namespace end <name>n). <index>: 1..200, unique among the tests running at the
#   same time (ctest -j): the world is 198.18.<index>.0/24 and 169.254.<index>.7.
#
# Address plan for index i:
#   host end <name>h       198.18.i.1/24   (connected route 198.18.i.0/24 on the host)
#   namespace end <name>n  198.18.i.2/24   first address; private ranges (10/8, 172.16/12,
#                                          192.168/16, 100.64/10) routed back via .1, no default
#                          198.18.i.10     web host: http :80, https :443, echo :7 (tcp+udp)
#                          198.18.i.20     second web host: the same servers
#                          198.18.i.53     DNS :53 udp+tcp, zone <workdir>/zone
#                          169.254.i.7/32  "link-local" http :80, routed from the host by
#                                          `169.254.i.7/32 via 198.18.i.2` (never 169.254.169.254)
#
# `up` creates the certificate (<workdir>/ca.pem, self-signed, SAN abx.test *.abx.test
# *.wild.abx.test *.other.test; key.pem beside it), writes the default zone unless <workdir>/zone
# exists, starts the servers (pids in <workdir>/pids), waits until each answers from inside the
# namespace, empties the logs of those probes, and prints on stdout, for
# `eval "$(internet.sh up ...)"`:
#   INET_NS=<name> INET_IF=<name>h INET_INDEX=<i> INET_NET=198.18.i.0/24 INET_GW=198.18.i.1
#   INET_WEB=198.18.i.10 INET_WEB2=198.18.i.20 INET_DNS=198.18.i.53 INET_LL=169.254.i.7
#   INET_CA=<workdir>/ca.pem INET_DIR=<workdir>
# Logs, one line per event (formats in servers.py): <workdir>/http-<ip>.log, https-<ip>.log,
# echo-<ip>.log, dns.log. The zone is re-read on change: a test may add lines while it runs.
# One DNS query from a test: `python3 servers.py query <server> <name> [--type AAAA] [--tcp]`.
# On failure `up` undoes what it did and exits non-zero (server output in <workdir>/*.out).
#
# `down` kills the servers (those in <workdir>/pids when given, and every process left in the
# namespace), deletes the namespace, the veth and the link-local route. Idempotent: exits 0 when
# all of it is already gone.
set -eEuo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
servers="$here/servers.py"

usage() {
  echo "usage: $0 up <name> <index 1..200> <workdir> | down <name> <index> [<workdir>]" >&2
  exit 2
}
check_args() {
  [[ "$1" =~ ^[A-Za-z0-9_-]{1,10}$ ]] || { echo "internet.sh: bad name '$1'" >&2; exit 2; }
  [[ "$2" =~ ^[0-9]{1,3}$ ]] && [ "$2" -ge 1 ] && [ "$2" -le 200 ] ||
    { echo "internet.sh: index '$2' not in 1..200" >&2; exit 2; }
}

running() {  # a live process, not a zombie waiting for its parent
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "${st:0:1}" != Z ]
}

# Everything `down` undoes; never fails.
teardown() {
  local name="$1" i="$2" dir="${3:-}" pids="" p
  # From the pids file only our servers: a pid in a stale file may since be anyone's.
  if [ -n "$dir" ] && [ -f "$dir/pids" ]; then
    for p in $(cat "$dir/pids"); do
      grep -qa -- "$servers" "/proc/$p/cmdline" 2>/dev/null && pids="$pids $p"
    done
  fi
  # Every process in the namespace: the test's (servers, or whatever it ran in there).
  pids="$pids $(ip netns pids "$name" 2>/dev/null || true)"
  for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 50); do
    local alive=0
    for p in $pids; do running "$p" && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
  [ -n "$dir" ] && rm -f "$dir/pids"
  ip route del "169.254.$i.7/32" via "198.18.$i.2" dev "${name}h" 2>/dev/null || true
  ip link del "${name}h" 2>/dev/null || true
  ip netns del "$name" 2>/dev/null || true
  return 0
}

# The certificate the TLS servers present; its own CA (self-signed), so curl --cacert ca.pem.
make_cert() {
  local dir="$1"
  [ -s "$dir/ca.pem" ] && [ -s "$dir/key.pem" ] && return 0
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=abx.test" \
    -addext "subjectAltName=DNS:abx.test,DNS:*.abx.test,DNS:*.wild.abx.test,DNS:*.other.test" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -keyout "$dir/key.pem" -out "$dir/ca.pem" >/dev/null 2>&1
}

start() {  # start <what> <args...>: one server in the namespace, detached from our stdout
  local dir="$1"; shift
  local tag="$1-${3:-}"
  ip netns exec "$name" python3 "$servers" "$@" </dev/null >>"$dir/$tag.out" 2>&1 &
  echo $! >>"$dir/pids"
}

up() {
  name="$1"; local i="$2" dir="$3"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  local net="198.18.$i" ll="169.254.$i.7" ns_if="${name}n" host_if="${name}h"
  # A world left by a crashed run of the same test goes first.
  teardown "$name" "$i" "$dir"
  trap 'teardown "$name" "$i" "$dir"' ERR
  make_cert "$dir"
  [ -f "$dir/zone" ] || cat >"$dir/zone" <<EOF
# name ip | name A ip | name AAAA ip6 | name CNAME target; *.x.test: wildcard (see servers.py)
web.abx.test $net.10
other.abx.test $net.20
*.wild.abx.test $net.10
evil.other.test $net.20
cname.abx.test CNAME web.abx.test
EOF
  ip netns add "$name"
  ip link add "$host_if" type veth peer name "$ns_if" netns "$name"
  ip addr add "$net.1/24" dev "$host_if"
  ip link set "$host_if" up
  ip -n "$name" link set lo up
  ip -n "$name" addr add "$net.2/24" dev "$ns_if"
  for a in 10 20 53; do ip -n "$name" addr add "$net.$a/24" dev "$ns_if"; done
  ip -n "$name" addr add "$ll/32" dev "$ns_if"
  ip -n "$name" link set "$ns_if" up
  # Replies to sandboxes (private addresses, should the daemon not masquerade) go back to the
  # host. No default route: nothing in here can send to a public address through the host.
  for r in 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16 100.64.0.0/10; do
    ip -n "$name" route add "$r" via "$net.1"
  done
  ip route add "$ll/32" via "$net.2" dev "$host_if"

  : >"$dir/pids"
  local a
  for a in "$net.10" "$net.20"; do
    start "$dir" http --bind "$a" --log "$dir/http-$a.log"
    start "$dir" https --bind "$a" --log "$dir/https-$a.log" \
      --cert "$dir/ca.pem" --key "$dir/key.pem"
    start "$dir" echo --bind "$a" --log "$dir/echo-$a.log"
  done
  start "$dir" http --bind "$ll" --log "$dir/http-$ll.log" --label ll
  start "$dir" dns --bind "$net.53" --log "$dir/dns.log" --zone "$dir/zone"

  if ! ip netns exec "$name" python3 "$servers" probe --cafile "$dir/ca.pem" --pids "$dir/pids" \
      --http "$net.10" --http "$net.20" --http "$ll" --https "$net.10" --https "$net.20" \
      --echo "$net.10" --echo "$net.20" --dns "$net.53" >&2; then
    echo "internet.sh: servers did not come up; output:" >&2
    tail -n 5 "$dir"/*.out >&2 || true
    teardown "$name" "$i" "$dir"
    exit 1
  fi
  trap - ERR
  # The probes' lines go; a test's logs hold only its own traffic.
  for f in "$dir"/http-*.log "$dir"/https-*.log "$dir"/echo-*.log "$dir/dns.log"; do : >"$f"; done
  echo "INET_NS=$name INET_IF=$host_if INET_INDEX=$i INET_NET=$net.0/24 INET_GW=$net.1"
  echo "INET_WEB=$net.10 INET_WEB2=$net.20 INET_DNS=$net.53 INET_LL=$ll"
  printf 'INET_CA=%q INET_DIR=%q\n' "$dir/ca.pem" "$dir"
}

[ $# -ge 1 ] || usage
case "$1" in
  up)
    [ $# -eq 4 ] || usage
    check_args "$2" "$3"
    up "$2" "$3" "$4"
    ;;
  down)
    [ $# -eq 3 ] || [ $# -eq 4 ] || usage
    check_args "$2" "$3"
    teardown "$2" "$3" "${4:-}"
    ;;
  *) usage ;;
esac

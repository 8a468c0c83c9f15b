#!/usr/bin/env bash
# Makes the certificates of an abx cluster with OpenSSL (docs/cluster.md, "TLS"):
#
#   scripts/cluster-certs.sh ca DIR                 # DIR/ca.pem and DIR/ca.key: a new cluster CA
#   scripts/cluster-certs.sh node DIR NAME SAN...   # DIR/NAME.pem, DIR/NAME.key signed by DIR/ca
#
# SAN is IP:ADDRESS or DNS:NAME, one per address the certificate must be valid for: a node's
# names its --advertise-url host (the other nodes check it), an etcd member's its client URL's
# host. A node certificate is good for both ends of a TLS connection (serverAuth, clientAuth), so
# one serves as a node's --cluster-cert and, signed by etcd's CA, as its --etcd-cert.
# Keys are EC P-256, written with mode 0400 (abxd refuses a key group or others can read).
# Validity: ABX_CERT_DAYS (default 825 for nodes, 3650 for the CA). Nothing is overwritten.
set -euo pipefail

usage() {
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

[[ $# -ge 2 ]] || usage
cmd=$1 dir=$2
umask 077
mkdir -p "$dir"

newkey() {  # $1: key file, made 0400
  [[ ! -e $1 ]] || { echo "cluster-certs: $1 exists; not overwritten" >&2; exit 1; }
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
  chmod 0400 "$1"
}

case $cmd in
  ca)
    [[ $# -eq 2 ]] || usage
    newkey "$dir/ca.key"
    openssl req -x509 -new -key "$dir/ca.key" -sha256 -days "${ABX_CERT_DAYS:-3650}" \
      -subj "/CN=abx cluster CA" -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
      -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$dir/ca.pem"
    chmod 0444 "$dir/ca.pem"
    echo "$dir/ca.pem (give to every node: --cluster-ca) and $dir/ca.key (keep offline)"
    ;;
  node)
    [[ $# -ge 4 ]] || usage
    name=$3
    shift 3
    [[ $name =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$ ]] || { echo "cluster-certs: bad name '$name'" >&2; exit 2; }
    sans=""
    for s in "$@"; do
      [[ $s =~ ^(IP|DNS):[A-Za-z0-9.:*-]+$ ]] || { echo "cluster-certs: bad SAN '$s' (IP:ADDR or DNS:NAME)" >&2; exit 2; }
      sans+="${sans:+,}$s"
    done
    [[ -r $dir/ca.key && -r $dir/ca.pem ]] || { echo "cluster-certs: no CA in $dir (run: $0 ca $dir)" >&2; exit 1; }
    newkey "$dir/$name.key"
    ext=$(mktemp)
    trap 'rm -f "$ext" "$dir/$name.csr"' EXIT
    printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n' "$sans" > "$ext"
    openssl req -new -key "$dir/$name.key" -subj "/CN=$name" -out "$dir/$name.csr"
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
      -CAcreateserial -sha256 -days "${ABX_CERT_DAYS:-825}" -extfile "$ext" \
      -out "$dir/$name.pem" 2>/dev/null
    chmod 0444 "$dir/$name.pem"
    echo "$dir/$name.pem and $dir/$name.key (0400) for $name ($sans)"
    ;;
  *) usage ;;
esac

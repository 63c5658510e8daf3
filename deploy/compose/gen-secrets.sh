#!/usr/bin/env bash
# Makes the secret files deploy/compose/compose.yaml mounts, into DIR
# (default: secrets/ beside this script, which .gitignore keeps out of git):
# the secrets key the daemons share, PostgreSQL's password (and the pgpass
# line the daemons read it from), a cluster CA with one certificate per
# daemon for their mutual TLS, and a self-signed certificate for clients.
# Replace tls.crt and tls.key with a certificate of your own CA for real
# clients. A file that exists is kept: run it again with another daemon in
# DAEMONS to add that daemon's certificate, signed by the same CA.
#
# The files are mode 0644 in a directory of mode 0700: compose mounts each
# file by itself, and the daemon's user in the image (uid 65532) is not the
# owner of the files on the host, so it can read them only that way; the
# directory keeps the host's other users out.
set -euo pipefail
dir=${1:-"$(dirname "$0")/secrets"}
daemons=${DAEMONS:-"trellis-1 trellis-2 trellis-3"}
mkdir -p "$dir" && chmod 0700 "$dir"
cd "$dir"
umask 022

[ -e secrets.key ] || openssl rand -base64 32 > secrets.key
[ -e pg-password ] || openssl rand -hex 24 > pg-password
[ -e pgpass ] || printf 'postgres:5432:trellis:trellis:%s\n' "$(cat pg-password)" > pgpass

# Clients' certificate: self-signed, for the names they use through the
# load balancer.
[ -e tls.crt ] || openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -days 365 \
  -subj "/CN=trellis" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout tls.key -out tls.crt 2>/dev/null

# The cluster's own CA, and a certificate per daemon for the host of its
# --advertise address (the compose service's name), for server and client
# authentication (docs/security.md, Mutual TLS between daemons).
[ -e cluster-ca.crt ] || (umask 077 && openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -days 3650 \
  -subj "/CN=trellis cluster CA" -keyout cluster-ca.key -out cluster-ca.crt 2>/dev/null)
chmod 0644 cluster-ca.crt
for n in $daemons; do
  [ ! -e "$n.crt" ] || continue
  [ -e cluster-ca.key ] || { echo "$dir/cluster-ca.key is gone: $n's certificate must be signed by the cluster's CA" >&2; exit 1; }
  openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
    -subj "/CN=trellisd $n" -keyout "$n.key" -out "$n.csr" 2>/dev/null
  openssl x509 -req -in "$n.csr" -CA cluster-ca.crt -CAkey cluster-ca.key -CAcreateserial -days 365 \
    -extfile <(printf 'subjectAltName=DNS:%s\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=digitalSignature\n' "$n") \
    -out "$n.crt" 2>/dev/null
  rm "$n.csr"
done
chmod 0644 tls.key secrets.key pgpass pg-password
for n in $daemons; do chmod 0644 "$n.key"; done
[ ! -e cluster-ca.key ] || chmod 0600 cluster-ca.key
echo "secrets written to $dir"

#!/usr/bin/env bash
# Makes the secret files deploy/compose/compose.yaml mounts, into DIR
# (default: secrets/ beside this script, which .gitignore keeps out of git):
# the secrets key the daemons share, PostgreSQL's password (and the pgpass
# line the daemons read it from), a cluster CA with one certificate per
# daemon for their mutual TLS, and a self-signed certificate for clients.
# Replace tls.crt and tls.key with a certificate of your own CA for real
# clients; keep cluster-ca.key offline once the certificates are made.
#
# The files are mode 0644 in a directory of mode 0700: compose mounts each
# file by itself, and the daemon's user in the image (uid 65532) is not the
# owner of the files on the host, so it can read them only that way; the
# directory keeps the host's other users out.
set -euo pipefail
dir=${1:-"$(dirname "$0")/secrets"}
daemons=${DAEMONS:-"trellis-1 trellis-2 trellis-3"}
[ ! -e "$dir/cluster-ca.crt" ] || { echo "$dir already holds secrets: remove it first, or give another directory" >&2; exit 1; }
mkdir -p "$dir" && chmod 0700 "$dir"
cd "$dir"
umask 022

openssl rand -base64 32 > secrets.key
openssl rand -hex 24 > pg-password
printf 'postgres:5432:trellis:trellis:%s\n' "$(cat pg-password)" > pgpass

# Clients' certificate: self-signed, for the names they use through the
# load balancer.
openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -days 365 \
  -subj "/CN=trellis" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout tls.key -out tls.crt 2>/dev/null

# The cluster's own CA, and a certificate per daemon for the host of its
# --advertise address (the compose service's name), for server and client
# authentication (docs/security.md, Mutual TLS between daemons).
(umask 077 && openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -days 3650 \
  -subj "/CN=trellis cluster CA" -keyout cluster-ca.key -out cluster-ca.crt 2>/dev/null)
chmod 0644 cluster-ca.crt
for n in $daemons; do
  openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
    -subj "/CN=trellisd $n" -keyout "$n.key" -out "$n.csr" 2>/dev/null
  openssl x509 -req -in "$n.csr" -CA cluster-ca.crt -CAkey cluster-ca.key -CAcreateserial -days 365 \
    -extfile <(printf 'subjectAltName=DNS:%s\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=digitalSignature\n' "$n") \
    -out "$n.crt" 2>/dev/null
  rm "$n.csr"
done
chmod 0644 ./*.key pgpass pg-password
chmod 0600 cluster-ca.key
echo "secrets written to $dir"

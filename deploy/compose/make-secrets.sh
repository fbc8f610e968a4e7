#!/bin/sh
# Writes the secret files docker-compose.yml reads (random values, mode 0600) unless they exist already.
set -eu
cd "$(dirname "$0")/secrets"
for name in admin-token triton-control-key postgres-password minio-root-password grafana-admin-password; do
  if [ ! -s "$name" ]; then
    umask 077
    python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > "$name"
    echo "wrote deploy/compose/secrets/$name"
  fi
done

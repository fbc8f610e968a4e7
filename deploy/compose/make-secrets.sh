#!/bin/sh
# Writes the secret files docker-compose.yml reads (random values, mode 0600) unless they exist already, and the
# deployment state's libpq service files (host, database, role, password) from the roles' passwords.
set -eu
cd "$(dirname "$0")/secrets"
umask 077
for name in admin-token triton-control-key postgres-password mlflow-db-password minio-root-password \
    grafana-admin-password state-writer-password state-reader-password; do
  if [ ! -s "$name" ]; then
    python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > "$name"
    echo "wrote deploy/compose/secrets/$name"
  fi
done
service_file() {  # service_file FILE ROLE PASSWORD_FILE: the role's connection, as libpq reads it (PGSERVICEFILE)
  if [ ! -s "$1" ]; then
    printf '[serving_state]\nhost=postgres\nport=5432\ndbname=serving_state\nuser=%s\npassword=%s\n' \
      "$2" "$(cat "$3")" > "$1"
    echo "wrote deploy/compose/secrets/$1"
  fi
}
service_file state-writer.conf serving_state_writer state-writer-password
service_file state-reader.conf serving_state_reader state-reader-password

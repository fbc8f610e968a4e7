#!/bin/sh
# Runs once, as PostgreSQL's superuser, when the image makes its data directory (/docker-entrypoint-initdb.d): MLflow's
# database owned by a role of its own, and the deployment state's database with the roles of
# deploy/sql/state-roles.sql, each password read from its secret file. MLflow's role cannot connect to the state's
# database, nor the state's roles to MLflow's (docs/deployment.md, Least privilege).
# SECRETS and STATE_ROLES_SQL say where the files are (the defaults: where docker-compose.yml mounts them).
set -eu
secrets="${SECRETS:-/run/secrets}"
run_psql() { psql -v ON_ERROR_STOP=1 -X -q --username "$POSTGRES_USER" "$@"; }

MLFLOW_PASSWORD="$(cat "$secrets/mlflow_db_password")" run_psql --dbname postgres <<'SQL'
\getenv password MLFLOW_PASSWORD
CREATE ROLE mlflow LOGIN PASSWORD :'password';
CREATE DATABASE mlflow OWNER mlflow;
REVOKE ALL ON DATABASE mlflow FROM PUBLIC;
CREATE DATABASE serving_state;
SQL

run_psql --dbname serving_state --file "${STATE_ROLES_SQL:-/etc/serving/state-roles.sql}"

WRITER_PASSWORD="$(cat "$secrets/state_writer_password")" READER_PASSWORD="$(cat "$secrets/state_reader_password")" \
    run_psql --dbname postgres <<'SQL'
\getenv writer WRITER_PASSWORD
\getenv reader READER_PASSWORD
ALTER ROLE serving_state_writer PASSWORD :'writer';
ALTER ROLE serving_state_reader PASSWORD :'reader';
SQL

"""Least privilege on the fleet's shared store, on a real PostgreSQL server (`tests/support/postgres.py`: every role
but its superuser logs in with its own password): `deploy/sql/state-roles.sql` makes the state's tables and three
roles, and each role can do what its process does and nothing more.

- A serving gateway's role reads the state (its workers serve from it, `GET /models/{endpoint}` answers) and cannot
  write it: an UPDATE, an INSERT, a DELETE, a DROP are refused by PostgreSQL, and the admin API on such a gateway
  says it may only read (before: the docs' one URL for every process, so every gateway could rewrite the state that
  decides which files every controller and agent host writes and deletes).
- An agent's role writes its replica's report and cannot change the state.
- A read-only process on a store whose tables are not there yet (or lack the epoch column) says so and makes
  nothing, and follows the store once the script made them.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg2
import pytest
import yaml
from psycopg2 import errors
from sqlalchemy import create_engine, inspect

from services.lifecycle import transitions
from services.lifecycle.store import DeploymentStore
from services.lifecycle.store.db import StateReadOnly
from tests.support.models import ROOT
from tests.support.postgres import HOST, USER, Postgres
from tests.support.servers import start_gateway_alone

SCRIPT = ROOT / "deploy" / "sql" / "state-roles.sql"
ROLES = ("serving_state_writer", "serving_state_reporter", "serving_state_reader")
TOKEN = "roles-admin-token"


def run_script(postgres: Postgres, database: str) -> None:
    """The script as the docs run it: psql, as the database's owner."""
    argv = [postgres.bin / "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", HOST, "-p", str(postgres.port)]
    argv += ["-U", USER, "-d", database, "-f", SCRIPT]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def as_superuser(postgres: Postgres, database: str, *statements: str) -> None:
    connection = psycopg2.connect(host=HOST, port=postgres.port, user=USER, dbname=database)
    connection.autocommit = True
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)
    connection.close()


class Fleet:
    """A state database the script prepared, each role with its password (given to its process as its docs say)."""

    def __init__(self, postgres: Postgres, database: str, files: Path):
        self.postgres, self.database, self.files = postgres, database, files
        self.passwords = {role: secrets.token_urlsafe(16) for role in ROLES}
        as_superuser(postgres, "postgres", *(f"ALTER ROLE {r} PASSWORD '{p}'" for r, p in self.passwords.items()))

    def url(self, role: str, database: str | None = None) -> str:
        """The role's URL (to `database`, default the fleet's), its password in a libpq password file (mode 0600:
        libpq ignores one others may read)."""
        database = database or self.database
        passfile = self.files / f"{role}.pgpass"
        passfile.write_text(f"{HOST}:{self.postgres.port}:*:{role}:{self.passwords[role]}\n")
        passfile.chmod(0o600)
        return f"postgresql+psycopg2://{role}@{HOST}:{self.postgres.port}/{database}?passfile={passfile}"

    def service_file(self, role: str) -> Path:
        """A libpq connection service file for `role` (service `serving_state`), as the Kubernetes Secret holds it."""
        path = self.files / f"{role}.service.conf"
        path.write_text(
            f"[serving_state]\nhost={HOST}\nport={self.postgres.port}\ndbname={self.database}\nuser={role}\n"
            f"password={self.passwords[role]}\n"
        )
        return path

    def connect(self, role: str):
        return psycopg2.connect(
            host=HOST, port=self.postgres.port, user=role, password=self.passwords[role], dbname=self.database
        )


@pytest.fixture(scope="module")
def fleet(postgres, tmp_path_factory) -> Fleet:
    postgres.create_database("state_roles")
    run_script(postgres, "state_roles")
    fleet = Fleet(postgres, "state_roles", tmp_path_factory.mktemp("role-files"))
    writer = DeploymentStore.open(fleet.url("serving_state_writer"))
    writer.update(lambda s: transitions.set_auto_update(s, "emb", "tiny-emb", 2))
    writer.close()
    return fleet


def refused(fleet: Fleet, role: str, statement: str) -> str:
    """PostgreSQL's refusal of `statement` to `role`; fails the test if the statement ran."""
    connection = fleet.connect(role)
    try:
        with connection.cursor() as cursor, pytest.raises(errors.InsufficientPrivilege) as refusal:
            cursor.execute(statement)
        return str(refusal.value)
    finally:
        connection.rollback()
        connection.close()


def columns(url: str) -> dict:
    engine = create_engine(url)
    found = inspect(engine)
    described = {
        table: (
            [(c["name"], str(c["type"]), c["nullable"], c["default"]) for c in found.get_columns(table)],
            found.get_pk_constraint(table)["constrained_columns"],
        )
        for table in sorted(found.get_table_names())
    }
    engine.dispose()
    return described


def row(postgres: Postgres, database: str) -> tuple:
    connection = psycopg2.connect(host=HOST, port=postgres.port, user=USER, dbname=database)
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, revision, document, epoch FROM serving_deployment_state")
        found = cursor.fetchall()
    connection.close()
    return found


def test_the_script_makes_the_store_the_services_make_and_can_run_again(postgres, fleet):
    services_url = postgres.create_database("state_roles_by_the_services")
    DeploymentStore.open(services_url).revision()  # the services' own first use makes it
    postgres.create_database("state_roles_by_the_script")
    run_script(postgres, "state_roles_by_the_script")
    assert columns(postgres.url("state_roles_by_the_script")) == columns(services_url)
    assert row(postgres, "state_roles_by_the_script") == row(postgres, "state_roles_by_the_services")
    run_script(postgres, fleet.database)  # again, as after an upgrade: nothing lost
    assert DeploymentStore.open(fleet.url("serving_state_reader")).read().endpoints["emb"].registered_name == "tiny-emb"


def test_a_gateways_role_reads_the_state_and_cannot_write_it(fleet):
    reader = DeploymentStore.open(fleet.url("serving_state_reader"))
    revision = reader.revision()
    assert reader.read().endpoints["emb"].registered_name == "tiny-emb"
    with pytest.raises(StateReadOnly) as refusal:
        reader.update(lambda s: transitions.set_auto_update(s, "emb", "attacker-model", 2))
    assert "permission denied for table serving_deployment_state" in refusal.value.message
    for statement in (
        "UPDATE serving_deployment_state SET document = '{\"endpoints\":{}}'",
        "INSERT INTO serving_deployment_state (id, revision, document) VALUES (2, 0, '{}')",
        "DELETE FROM serving_deployment_state",
        "DROP TABLE serving_deployment_state",
        "CREATE TABLE serving_deployment_state_2 (id INTEGER)",
        "INSERT INTO serving_replica_reports VALUES ('r', '{}', 0)",
        "SELECT * FROM serving_replica_reports",
    ):
        refused(fleet, "serving_state_reader", statement)
    assert reader.revision() == revision and reader.read().endpoints["emb"].registered_name == "tiny-emb"
    reader.close()


def test_an_agents_role_reports_its_replica_and_cannot_change_the_state(fleet):
    reporter = DeploymentStore.open(fleet.url("serving_state_reporter"))
    writer = DeploymentStore.open(fleet.url("serving_state_writer"))
    revision = writer.revision()
    reporter.report_replica("127.0.0.2:8001", {"emb": ["1"]}, now=1000.0)
    reporter.report_replica("127.0.0.2:8001", {"emb": ["1", "2"]}, now=1001.0)  # the upsert: its second report
    assert writer.replicas(now=1001.0, ttl=10) == {"127.0.0.2:8001": {"emb": ["1", "2"]}}
    assert reporter.read().endpoints["emb"].registered_name == "tiny-emb"
    with pytest.raises(StateReadOnly):
        reporter.update(lambda s: transitions.set_auto_update(s, "emb", "attacker-model", 2))
    for statement in (
        "UPDATE serving_deployment_state SET revision = revision + 1",
        "DELETE FROM serving_replica_reports",
        "TRUNCATE serving_replica_reports",
        "ALTER TABLE serving_deployment_state DROP COLUMN epoch",
    ):
        refused(fleet, "serving_state_reporter", statement)
    refused(fleet, "serving_state_writer", "DROP TABLE serving_deployment_state")
    assert writer.revision() == revision
    reporter.close()
    writer.close()


def test_a_gateway_on_the_read_only_role_serves_the_state_and_its_admin_api_says_it_may_only_read(fleet, tmp_path):
    """The gateway as the Kubernetes template runs it: a service URL, the password in the Secret's service file."""
    env = {
        "SERVING_STATE_URL": "postgresql+psycopg2://?service=serving_state",
        "PGSERVICEFILE": str(fleet.service_file("serving_state_reader")),
        "GATEWAY_ADMIN_TOKEN": TOKEN,
        "GATEWAY_ENDPOINTS_POLL_INTERVAL": "0.2",
    }
    url, launcher = start_gateway_alone(tmp_path, env)
    store = DeploymentStore.open(fleet.url("serving_state_writer"))
    revision = store.revision()
    try:
        lineage = httpx.get(f"{url}/models/emb", timeout=10)
        assert lineage.status_code == 200 and lineage.json()["registered_name"] == "tiny-emb", lineage.text
        headers = {"Authorization": f"Bearer {TOKEN}"}
        body = {"name": "attacker-model", "max_versions": 2}
        change = httpx.put(f"{url}/admin/endpoints/emb/auto-update", json=body, headers=headers, timeout=10)
        assert change.status_code == 503, change.text
        assert "may only read the deployment state" in change.json()["error"]["message"]
        assert store.revision() == revision and store.read().endpoints["emb"].registered_name == "tiny-emb"
    finally:
        launcher.stop_all()
        store.close()
    log = (tmp_path / "logs" / "api.log").read_text()
    assert "permission denied for table serving_deployment_state" in log


def test_a_read_only_role_on_a_store_without_its_tables_says_so_and_makes_nothing(postgres, fleet):
    """Before the script ran (or before an upgrade added the epoch column), a gateway's first use would try to make
    them: refused by PostgreSQL, it says what is missing and who makes it; it reads the store once the script ran."""
    for database, before in (
        ("state_roles_new", []),
        (
            "state_roles_old",
            [
                "CREATE TABLE serving_deployment_state (id INTEGER PRIMARY KEY, revision INTEGER NOT NULL, "
                "document TEXT NOT NULL)",
                "INSERT INTO serving_deployment_state VALUES (1, 3, '{\"endpoints\":{}}')",
                "GRANT SELECT ON serving_deployment_state TO serving_state_reader",
            ],
        ),
    ):
        postgres.create_database(database)
        as_superuser(postgres, database, *before)
        reader = DeploymentStore.open(fleet.url("serving_state_reader", database))
        for _ in range(2):  # said again at the next poll, not cached
            with pytest.raises(StateReadOnly) as refusal:
                reader.stamp()
            assert "its tables are not there yet (or lack the epoch column)" in refusal.value.message
            assert "deploy/sql/state-roles.sql" in refusal.value.message
        made = columns(postgres.url(database))
        assert ("serving_replica_reports" in made) is False, "a read-only role made nothing"
        assert all(name != "epoch" for name, *_ in made.get("serving_deployment_state", ([], []))[0])
        run_script(postgres, database)
        assert reader.read().endpoints == {}
        assert reader.revision() == (3 if before else 0)
        reader.close()


def test_the_state_row_is_never_made_again_once_it_was_deleted(postgres, fleet):
    """A row deleted by hand is a lost state: the script run again does not turn it into a new empty one (every
    gateway would drop its endpoints)."""
    postgres.create_database("state_roles_deleted")
    run_script(postgres, "state_roles_deleted")
    as_superuser(postgres, "state_roles_deleted", "DELETE FROM serving_deployment_state")
    run_script(postgres, "state_roles_deleted")
    connection = psycopg2.connect(host=HOST, port=postgres.port, user=USER, dbname="state_roles_deleted")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM serving_deployment_state")
        assert cursor.fetchone()[0] == 0
    connection.close()


COMPOSE = ROOT / "deploy" / "compose"


@pytest.fixture(scope="module")
def compose_postgres(tmp_path_factory) -> Iterator[tuple[Postgres, Path]]:
    """A new PostgreSQL server as the Compose file's first start makes it: `make-secrets.sh` (a copy, writing into a
    folder of the test's own), then the image's init script with those files where Compose mounts its secrets."""
    work = tmp_path_factory.mktemp("compose")
    (work / "secrets").mkdir()
    shutil.copy(COMPOSE / "make-secrets.sh", work / "make-secrets.sh")
    subprocess.run(["sh", str(work / "make-secrets.sh")], check=True, capture_output=True, timeout=60)
    mounted = work / "run-secrets"  # Compose mounts each secret at /run/secrets/<its name in the file>
    mounted.mkdir()
    for name, secret in yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())["secrets"].items():
        shutil.copy(work / "secrets" / Path(secret["file"]).name, mounted / name)
    root = Path(tempfile.mkdtemp(prefix="serving-compose-postgres-"))  # postgres reads it: not under pytest's root
    server = Postgres(root)
    server.start()
    env = os.environ | {
        "POSTGRES_USER": USER,
        "PGHOST": HOST,
        "PGPORT": str(server.port),
        "SECRETS": str(mounted),
        "STATE_ROLES_SQL": str(SCRIPT),
        "PATH": f"{server.bin}:{os.environ['PATH']}",
    }
    done = subprocess.run(
        ["sh", str(COMPOSE / "postgres-init" / "10-serving.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        yield server, mounted
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def service_file_here(mounted: Path, secret: str, server: Postgres, target: Path) -> Path:
    """The Compose service file, its host and port those of the test's server (`postgres:5432` in Compose)."""
    text = (mounted / secret).read_text().replace("host=postgres", f"host={HOST}")
    target.write_text(text.replace("port=5432", f"port={server.port}"))
    return target


def test_composes_first_start_gives_each_process_its_role_and_mlflow_none_on_the_state(
    compose_postgres, tmp_path, monkeypatch
):
    server, mounted = compose_postgres
    url = "postgresql+psycopg2://?service=serving_state"
    monkeypatch.setenv("PGSERVICEFILE", str(service_file_here(mounted, "state_writer_service", server, tmp_path / "w")))
    writer = DeploymentStore.open(url)
    writer.update(lambda s: transitions.set_auto_update(s, "emb", "tiny-emb", 2))
    monkeypatch.setenv("PGSERVICEFILE", str(service_file_here(mounted, "state_reader_service", server, tmp_path / "r")))
    reader = DeploymentStore.open(url)
    assert reader.read().endpoints["emb"].registered_name == "tiny-emb"
    with pytest.raises(StateReadOnly):
        reader.update(lambda s: transitions.set_auto_update(s, "emb", "attacker-model", 2))
    writer.close()
    reader.close()

    def connect(role: str, password: str, database: str):
        return psycopg2.connect(host=HOST, port=server.port, user=role, password=password, dbname=database)

    mlflow_password = (mounted / "mlflow_db_password").read_text().strip()
    connect("mlflow", mlflow_password, "mlflow").close()  # MLflow reaches its own database
    with pytest.raises(psycopg2.OperationalError, match="permission denied for database"):
        connect("mlflow", mlflow_password, "serving_state")  # and not the state's
    reader_password = (mounted / "state_reader_password").read_text().strip()
    with pytest.raises(psycopg2.OperationalError, match="permission denied for database"):
        connect("serving_state_reader", reader_password, "mlflow")
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        connect("serving_state_reporter", "guessed", "serving_state")  # Compose has no agents: it has no password

"""A database password is in no log line and no message, wherever it was given, on a real PostgreSQL server that
asks every role but its superuser for its password (`tests/support/postgres.py`).

The password goes in the state URL's userinfo (`user:PASSWORD@`), in its query (`?password=PASSWORD`, which libpq
reads too) or in libpq's environment (`PGPASSWORD`); it is a wrong one, so that every process says the store refused
it. Before: the query parameter was printed whole by the gateway's log lines ("deployment state store
postgresql+psycopg2://...?password=... unreachable"), the agent's ("syncing from ...?password=..."), the controller's
and `serving state accept`'s message, and a URL with a typo in its scheme was printed whole, userinfo and all, by
every process's start ("SERVING_STATE_URL '...' is not a database URL").
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.launcher import Launcher, ProcessSpec
from tests.support.postgres import HOST, Postgres
from tests.support.servers import start_gateway_alone

SECRET = "Pw-0f-the-st4te-St0re"
ROLE = "serving_password_probe"
SERVING = Path(sys.executable).parent / "serving"


@pytest.fixture(scope="module")
def database(postgres: Postgres) -> str:
    """A database and a role whose real password is not SECRET: every connection below is refused."""
    import psycopg2

    postgres.create_database("password_probe")
    connection = psycopg2.connect(host=HOST, port=postgres.port, user="serving", dbname="postgres")
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute(f"DROP ROLE IF EXISTS {ROLE}")
        cursor.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD 'the-real-one'")
    connection.close()
    return "password_probe"


def given(postgres: Postgres, database: str, where: str) -> tuple[str, dict[str, str]]:
    """The state URL and the environment that give SECRET `where`."""
    base = f"{HOST}:{postgres.port}/{database}"
    if where == "userinfo":
        return f"postgresql+psycopg2://{ROLE}:{SECRET}@{base}", {}
    if where == "query":
        return f"postgresql+psycopg2://{ROLE}@{base}?sslmode=disable&password={SECRET}", {}
    return f"postgresql+psycopg2://{ROLE}@{base}", {"PGPASSWORD": SECRET}


WHERE = ["userinfo", "query", "environment"]


def wait_for(path: Path, text: str, timeout: float = 90) -> str:
    """The file's content once it holds `text` (polled; a generous deadline on a busy machine)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = path.read_text(errors="replace") if path.exists() else ""
        if text in content:
            return content
        time.sleep(0.2)
    raise AssertionError(f"{path} never said {text!r}: {content[-2000:]}")


@pytest.mark.parametrize("where", WHERE)
def test_the_gateway_logs_the_refused_store_without_its_password(postgres, database, where, tmp_path):
    url, env = given(postgres, database, where)
    env = env | {"SERVING_STATE_URL": url, "GATEWAY_ENDPOINTS_POLL_INTERVAL": "0.2"}
    _, launcher = start_gateway_alone(tmp_path, env)
    try:
        log = wait_for(tmp_path / "logs" / "api.log", "password authentication failed")
    finally:
        launcher.stop_all()
    assert f"{ROLE}@" in log or f"{ROLE}:***@" in log, "the store is named"
    assert SECRET not in log


def test_the_agent_and_the_controller_log_the_refused_store_without_its_password(postgres, database, tmp_path):
    """One start of each (they take seconds): the password in the URL's query and in PGPASSWORD at once."""
    url, _ = given(postgres, database, "query")
    (tmp_path / "triton-control-key").write_text("a-key\n")
    common = {"SERVING_RUN_DIR": str(tmp_path), "SERVING_STATE_URL": url, "PGPASSWORD": SECRET}
    agent = ProcessSpec(
        name="triton-agent",
        argv=[str(SERVING), "triton-agent"],
        env=common | {"AGENT_START_TRITON": "false", "AGENT_TRITON_HTTP_URL": "http://127.0.0.1:1"},
    )
    controller = ProcessSpec(
        name="controller",
        argv=[sys.executable, "-m", "services.controller"],
        env=common
        | {"CONTROLLER_TRITON_HTTP_URL": "http://127.0.0.1:1", "CONTROLLER_GATEWAY_URL": "http://127.0.0.1:1"},
    )
    launcher = Launcher(tmp_path)
    try:
        launcher.start_ready(agent, detach=True, timeout=60)
        launcher.start_ready(controller, detach=True, timeout=60)
        logs = [  # the agent says which store it syncs from, then finds its Triton away before it reads the store
            wait_for(tmp_path / "logs" / "triton-agent.log", "syncing from"),
            wait_for(tmp_path / "logs" / "controller.log", "password authentication failed"),
        ]
    finally:
        launcher.stop_all()
    assert "watching the deployment state in" in logs[1]
    for log in logs:
        assert SECRET not in log


@pytest.mark.parametrize("where", WHERE)
def test_serving_state_says_the_refused_store_without_its_password(postgres, database, where, tmp_path):
    url, env = given(postgres, database, where)
    done = subprocess.run(
        [str(SERVING), "state", "accept"],
        env=os.environ | env | {"SERVING_STATE_URL": url, "SERVING_RUN_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "password authentication failed" in said, said
    assert SECRET not in said


def test_a_url_no_parser_takes_is_said_without_its_password(tmp_path):
    """A typo in the scheme (`postgresql+psycopg2//`): the URL is refused, and shown without the password."""
    url = f"postgresql+psycopg2//{ROLE}:{SECRET}@{HOST}:5432/db"
    done = subprocess.run(
        [str(SERVING), "state", "accept"],
        env=os.environ | {"SERVING_STATE_URL": url, "SERVING_RUN_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "is not a database URL" in said, said
    assert SECRET not in said and f"{ROLE}:***@" in said

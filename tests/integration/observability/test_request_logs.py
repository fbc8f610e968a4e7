"""`serving logs --request-id` finds a served request and a refused one of a detached stack (issue 23: both
printed nothing, exit 0: no line was written for a 200, and none for a 4xx)."""

import json
import time

import pytest
from typer.testing import CliRunner

from services.cli import app
from tests.support.servers import start_http_stack

ENV = {"SERVING_OBSERVABILITY__LOG_JSON": "true", "SERVING_COMPLETION_LOG_SAMPLE": "1"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory, tiny_model):
    run_dir = tmp_path_factory.mktemp("request-logs")
    server = start_http_stack(run_dir, tiny_model, env=ENV)
    yield server, run_dir
    server.launcher.stop_all()


def logs(run_dir, *args):
    return CliRunner().invoke(app, ["logs", *args], env={"SERVING_RUN_DIR": str(run_dir)})


def find(run_dir, request_id: str) -> list[dict]:
    """The JSON lines `serving logs --request-id` prints for the id (the line is written just after the answer)."""
    for _ in range(40):
        result = logs(run_dir, "--request-id", request_id, "--json")
        if result.exit_code == 0:
            return [json.loads(line) for line in result.stdout.splitlines()]
        time.sleep(0.05)
    raise AssertionError(result.output)


def test_a_200_and_a_422_are_both_found_by_their_request_id(stack):
    server, run_dir = stack
    with server.client() as client:
        served = client.post("/serve/minilm", json={"text": "hello"})
        refused = client.post("/serve/minilm", json={"txet": "hello"})
    assert (served.status_code, refused.status_code) == (200, 422)
    assert refused.json()["error"]["request_id"] == refused.headers["x-request-id"]
    for answer in (served, refused):
        (line,) = find(run_dir, answer.headers["x-request-id"])
        assert (line["status"], line["endpoint"], line["service"]) == (answer.status_code, "minilm", "api")
        assert line["version"] == server.manifest.version and line["latency_ms"] > 0
        print(f"\n{answer.status_code}: {line['msg']}")
    shown = logs(run_dir, "--request-id", refused.headers["x-request-id"]).stdout
    assert "-> 422 in" in shown and f"request_id={refused.headers['x-request-id']}" in shown


def test_an_unknown_id_is_said_not_found(stack):
    _, run_dir = stack
    result = logs(run_dir, "--request-id", "no-such-id")
    assert result.exit_code == 1 and "no log line has request id no-such-id" in result.output
    assert "sampling" not in result.output, "this stack logs every request"

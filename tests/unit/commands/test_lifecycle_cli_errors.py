"""`serving model ...` refusals as a person reads them, over a real socket: the gateway's message and what to do
next, never a bare HTTP status code."""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler

import pytest
from typer.testing import CliRunner

from services.cli import app
from tests.support.http_stub import send_json, serve

ANSWERS = {
    "/admin/endpoints/sentiment/rollout": (
        409,
        {
            "error": {
                "message": "version 2 of 'sentiment' is rejected (rolled back), not live (live: ['1']); deploy "
                "it again first: `serving model redeploy sentiment --version 2`"
            }
        },
    ),
    "/admin/endpoints/sentiment/versions/7/redeploy": (
        404,
        {"error": {"message": "'sentiment' never had version 7 (it had ['1', '2'])"}},
    ),
    "/admin/endpoints/locked/versions/1/redeploy": (401, {"error": {"message": "missing or wrong bearer token"}}),
    "/admin/endpoints/ok/rollout": (200, {"endpoint": "ok", "rollout": {"dwell": 60, "min_requests": 200}}),
    "/admin/endpoints/away/versions/1/redeploy": (
        503,
        {"error": {"message": "the deployment state cannot be read now; the server log has why"}},
        {"Retry-After": "1"},
    ),
    "/admin/endpoints/reader/versions/1/redeploy": (
        503,
        {"error": {"message": "this gateway may only read the deployment state: send admin requests to the admin API"}},
    ),
}


class Gateway(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - the stdlib's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        send_json(self, *ANSWERS[self.path])

    def do_GET(self):  # noqa: N802 - the stdlib's name
        version = {
            "version": "2",
            "state": "live",
            "traffic_share": 1.0,
            "requests_total": 5.0,
            "share_reason": "pinned by the promoted rollout of version 2: takes all of the endpoint's traffic",
            "registry": {"name": "sentiment", "version": "2"},
        }
        send_json(self, 200, {"endpoints": [{"endpoint": "sentiment", "versions": [version]}]})

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def gateway():
    yield from serve(Gateway)


@pytest.mark.parametrize(
    "command, says",
    [
        (["rollout", "sentiment", "--version", "2"], "deploy it again first: `serving model redeploy sentiment"),
        (["redeploy", "sentiment", "--version", "7"], "`serving model list` shows the deployed endpoints"),
        (["redeploy", "locked", "--version", "1"], "missing or wrong bearer token; pass the gateway's admin token"),
        (["redeploy", "away", "--version", "1"], "cannot be read now; the server log has why; the gateway cannot use"),
    ],
)
def test_a_refusal_says_what_to_do_next_without_a_status_code(gateway, command, says):
    result = CliRunner().invoke(app, ["model", *command, "--url", gateway, "--token", "t"])
    output = " ".join(result.output.split())
    assert result.exit_code != 0 and says in output, output
    assert not re.search(r"\b(401|404|409)\b", output), output


def test_a_refusal_that_retrying_does_not_help_is_not_told_to_retry(gateway):
    """A gateway whose database role may only read answers 503 without Retry-After: its message says what to do."""
    result = CliRunner().invoke(
        app, ["model", "redeploy", "reader", "--version", "1", "--url", gateway, "--token", "t"]
    )
    output = " ".join(result.output.split())
    assert result.exit_code != 0 and "send admin requests to the admin API" in output and "try again" not in output


def test_a_started_rollout_says_when_it_is_judged_and_where_to_follow_it(gateway):
    result = CliRunner().invoke(app, ["model", "rollout", "ok", "--version", "2", "--url", gateway, "--token", "t"])
    assert result.exit_code == 0, result.output
    assert "once both versions answered 200 requests; `serving model list ok` says where it stands" in " ".join(
        result.stderr.split()
    )


def test_listing_an_endpoint_that_is_not_deployed_fails_naming_the_deployed_ones(gateway):
    result = CliRunner().invoke(app, ["model", "list", "nosuch", "--url", gateway, "--token", "t"])
    assert result.exit_code == 2, result.output
    assert "no deployed endpoint 'nosuch'; deployed: sentiment" in " ".join(result.output.split())


def test_without_url_a_command_calls_the_gateway_the_run_directorys_stack_serves(gateway, tmp_path, monkeypatch):
    from services.launcher.records import STACK_INFO

    (tmp_path / STACK_INFO).write_text(json.dumps({"stack": "clearml", "urls": {"api": gateway}}))
    monkeypatch.setenv("SERVING_RUN_DIR", str(tmp_path))
    result = CliRunner().invoke(app, ["model", "list", "nosuch", "--token", "t"])
    assert result.exit_code == 2 and "deployed: sentiment" in " ".join(result.output.split()), result.output


def test_a_wide_listing_keeps_each_row_on_one_line(gateway):
    why = "pinned by the promoted rollout of version 2: takes all of the endpoint's traffic"
    narrow = CliRunner().invoke(app, ["model", "list", "--url", gateway, "--token", "t"], env={"COLUMNS": "80"})
    wide = CliRunner().invoke(app, ["model", "list", "--wide", "--url", gateway, "--token", "t"], env={"COLUMNS": "80"})
    assert narrow.exit_code == wide.exit_code == 0, narrow.output + wide.output
    assert why not in narrow.output and why in wide.output, "folded at 80 columns; whole on one line with --wide"

"""`serving model canary` as clearml-serving types it (`--versions 2 1 --weights 0.1 0.9`) and as this project did
(each option repeated): the same request reaches the admin API, over a real socket to a server that records it."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

import pytest
from typer.testing import CliRunner

from services.cli import app
from tests.support.http_stub import send_json, serve


class Recorder(BaseHTTPRequestHandler):
    bodies: list[tuple[str, str, dict]] = []

    def do_PUT(self):  # noqa: N802 - the stdlib's name
        length = int(self.headers["Content-Length"])
        self.bodies.append((self.command, self.path, json.loads(self.rfile.read(length))))
        send_json(self, 200, {"ok": True})

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def admin():
    yield from serve(Recorder)


def canary(url: str, *args: str):
    Recorder.bodies.clear()
    result = CliRunner().invoke(app, ["model", "canary", "sentiment", *args, "--url", url, "--token", "t"])
    return result, list(Recorder.bodies)


@pytest.mark.parametrize(
    "args",
    [
        ["--versions", "2", "1", "--weights", "0.1", "0.9"],
        ["--versions", "2", "--versions", "1", "--weights", "0.1", "--weights", "0.9"],
        ["--weights", "0.1", "0.9", "--versions", "2", "1"],
    ],
)
def test_both_forms_send_the_same_canary(admin, args):
    result, bodies = canary(admin, *args)
    assert result.exit_code == 0, result.output
    assert bodies == [
        ("PUT", "/admin/endpoints/sentiment/canary", {"weights": [0.1, 0.9], "versions": ["2", "1"], "newest": None})
    ]


def test_newest_with_several_weights(admin):
    result, bodies = canary(admin, "--newest", "2", "--weights", "0.1", "0.9")
    assert result.exit_code == 0, result.output
    assert bodies[0][2] == {"weights": [0.1, 0.9], "versions": None, "newest": 2}


def test_versions_and_weights_of_other_lengths_are_refused_before_any_request(admin):
    result, bodies = canary(admin, "--versions", "2", "1", "3", "--weights", "0.1", "0.9")
    assert result.exit_code == 2 and bodies == []
    assert "--versions has 3 values and --weights 2: give one weight per version" in result.output


def test_a_weight_that_is_not_a_number_is_refused(admin):
    result, bodies = canary(admin, "--versions", "2", "1", "--weights", "0.1", "x")
    assert result.exit_code == 2 and bodies == [] and "Invalid value for '--weights'" in result.output

"""One completion line per inference request, written by the edge (`services.api.edge`), the one place that knows
every request's outcome: before it, a served request wrote nothing and a 4xx nothing either, so the id a caller got
in `x-request-id` led to no log line (issue 23)."""

import io
import json
import logging

import pytest
from starlette.testclient import TestClient

from observability.logging import ContextFilter, JsonFormatter, set_serving_model
from services.api.admission import Gate
from services.api.edge import Edge
from services.api.lifetime import Lifetimes


@pytest.fixture
def lines():
    """The JSON completion lines written while the test runs."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter(service="unit"))
    logger = logging.getLogger("serving.completion")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    logger.removeHandler(handler)
    logger.setLevel(logging.NOTSET)


def _client(status: int, sample: float = 1.0) -> TestClient:
    async def app(scope, receive, send):
        if status < 400:  # a version was chosen (as `DataPlane.serve` does) before the answer
            set_serving_model("minilm", "3", "run-1")
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    return TestClient(Edge(app, "unit", Gate(64), Lifetimes(60.0), completion_sample=sample))


def test_a_served_request_writes_one_line_with_its_outcome(lines):
    answer = _client(200).post("/serve/minilm", headers={"x-request-id": "req-200"}, json={"text": "a"})
    (line,) = lines()
    assert answer.headers["x-request-id"] == line["request_id"] == "req-200"
    assert (line["method"], line["path"], line["status"]) == ("POST", "/serve/minilm", 200)
    assert (line["endpoint"], line["version"], line["run_id"]) == ("minilm", "3", "run-1")
    assert 0 <= line["latency_ms"] < 5000 and "trace_id" in line and line["service"] == "unit"
    assert line["msg"].startswith("POST /serve/minilm -> 200 in ")


def test_a_refused_request_names_the_endpoint_and_version_its_path_asked_for(lines):
    _client(422).post("/serve/minilm/7", headers={"x-request-id": "req-422"}, json={})
    (line,) = lines()
    assert (line["request_id"], line["status"], line["endpoint"], line["version"]) == ("req-422", 422, "minilm", "7")


def test_errors_always_write_their_line_and_successes_their_sampled_share(lines):
    for _ in range(20):
        _client(200, sample=0.0).post("/v1/embeddings", json={})
        _client(429, sample=0.0).post("/v1/embeddings", json={})
    assert [line["status"] for line in lines()] == [429] * 20


def test_probes_scrapes_and_reads_write_no_line(lines):
    client = _client(200)
    client.get("/health/ready"), client.get("/metrics"), client.get("/serve/minilm"), client.get("/models/minilm")
    assert lines() == []


def test_a_path_of_60000_characters_writes_a_short_line_with_its_length(lines):
    """Before (issue 37): the raw path went into the message, `path` and `endpoint`: 180 KB of log per request."""
    name = "a" * 60_000 + "%0A{injected}"  # the path as the server decodes it holds a newline
    _client(404).post(f"/serve/{name}/7", json={})
    (line,) = lines()
    size = len(json.dumps(line))
    print(f"\ncompletion line of a 60,000-character path: {size} bytes")
    assert size < 1000 and line["route"] == "/serve" and line["status"] == 404
    assert line["path"].endswith("... (60020 characters)") and line["endpoint"].endswith("... (60011 characters)")
    assert "\n" not in line["msg"] and line["version"] == "7"

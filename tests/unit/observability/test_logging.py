import contextvars
import io
import json
import logging
import os
import time

import pytest

from observability.logging import (
    PLAIN_FORMAT,
    ContextFilter,
    JsonFormatter,
    PlainFormatter,
    lean_records,
    request_id_var,
    set_serving_model,
    trace_id_var,
)


@pytest.fixture
def captured():
    """A JSON logger writing into a string, and the parsed lines it wrote."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter(service="unit"))
    logger = logging.getLogger("test.json")
    logger.addHandler(handler)
    logger.propagate = False
    yield logger, lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    logger.removeHandler(handler)


def test_json_log_lines_carry_service_request_and_trace_ids(captured):
    logger, lines = captured
    token_r, token_t = request_id_var.set("req-1"), trace_id_var.set("abc")
    try:
        logger.warning("served %d texts", 3, extra={"endpoint": "minilm"})
    finally:
        request_id_var.reset(token_r)
        trace_id_var.reset(token_t)
    (entry,) = lines()
    assert entry["msg"] == "served 3 texts" and entry["level"] == "WARNING" and entry["service"] == "unit"
    assert entry["request_id"] == "req-1" and entry["trace_id"] == "abc" and entry["endpoint"] == "minilm"


def test_lean_records_skip_the_caller_and_keep_every_field_a_line_shows(captured, monkeypatch):
    for name in ("_srcfile", "logThreads", "logMultiprocessing"):
        monkeypatch.setattr(logging, name, getattr(logging, name))  # restored after the test
    lean_records()
    logger, lines = captured
    plain = io.StringIO()
    handler = logging.StreamHandler(plain)
    handler.addFilter(ContextFilter())
    handler.setFormatter(PlainFormatter(PLAIN_FORMAT))
    logger.addHandler(handler)
    token = request_id_var.set("req-2")
    try:
        logger.warning("POST %s -> %d", "/serve/minilm", 200, extra={"status": 200})
    finally:
        request_id_var.reset(token)
        logger.removeHandler(handler)
    (entry,) = lines()
    assert entry["msg"] == "POST /serve/minilm -> 200" and entry["request_id"] == "req-2" and entry["status"] == 200
    assert "funcName" not in entry and "threadName" not in entry
    assert f"[{os.getpid()}] req=req-2 trace=- POST /serve/minilm -> 200" in plain.getvalue()
    record = logger.makeRecord("x", logging.INFO, "(unknown file)", 0, "m", (), None)
    assert record.threadName is None and record.processName is None, "not looked up any more"


def test_log_lines_name_the_model_version_and_its_run_once_set(captured):
    logger, lines = captured

    def request() -> None:
        set_serving_model("emb", "3", "run-abc")
        logger.warning("inside")

    contextvars.copy_context().run(request)
    logger.warning("outside")
    inside, outside = lines()
    assert (inside["endpoint"], inside["version"], inside["run_id"]) == ("emb", "3", "run-abc")
    assert "version" not in outside, "another request's model never leaks into a line"


def _echo_app():
    """The edge around an app that answers the request id its log lines would carry."""
    from starlette.testclient import TestClient

    from services.api.admission import Gate
    from services.api.edge import Edge
    from services.api.lifetime import Lifetimes

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": request_id_var.get().encode()})

    return TestClient(Edge(app, "unit", Gate(64), Lifetimes(60.0)))


@pytest.mark.parametrize(
    "given", ["abc123", "0b9e5c0e-2f1d-4a8e-9d7c-1b2f3a4c5d6e", "01HZX3JY8Q7K2M4N6P8R0T2V4W", "a" * 128, "dGVzdA=="]
)
def test_a_short_safe_request_id_is_kept_in_the_logs_and_the_answer(given):
    answer = _echo_app().get("/serve/x", headers={"x-request-id": given})
    assert answer.headers["x-request-id"] == given and answer.text == given


@pytest.mark.parametrize(
    "given", ["x" * 100_000, "a" * 129, "a\tb", "id with spaces", "<script>", "a;b", "a\\nb", '"quoted"']
)
def test_a_long_or_unsafe_request_id_is_replaced_never_echoed(given):
    """Before: a 100 KB x-request-id was echoed back as is (and written into every log line of the request)."""
    answer = _echo_app().get("/serve/x", headers={"x-request-id": given})
    ours = answer.headers["x-request-id"]
    assert ours != given and ours == answer.text and len(ours) < 40
    print(f"\nx-request-id of {len(given)} characters -> answered {ours}")


def test_a_traceback_holding_a_client_s_text_and_a_long_message_are_cut(captured):
    """Before (issue 37): user code failing with a client's 60,000 characters in its exception wrote them whole,
    in every line of its traceback that holds them."""
    logger, lines = captured
    try:
        raise KeyError("k" * 60_000)
    except KeyError:
        logger.exception("process of endpoint '%s' failed", "x" * 20_000)
    (entry,) = lines()
    assert len(json.dumps(entry)) < 12_000
    message, last = entry["msg"], entry["exc"].splitlines()[-1]
    whole = len("process of endpoint '" + "x" * 20_000 + "' failed")
    assert len(message) < 8100 and message.endswith(f"... ({whole} characters)")
    assert "Traceback" in entry["exc"] and last.startswith("KeyError: 'kkk") and last.endswith(" characters)")
    assert max(map(len, entry["exc"].splitlines())) < 1100


def test_json_timestamps_are_utc_to_the_millisecond_across_seconds():
    formatter = JsonFormatter(service="unit")
    record = logging.LogRecord("x", logging.INFO, "f", 0, "m", None, None)
    for created in (1_764_780_000.123, 1_764_780_000.999, 1_764_780_001.0, 1_764_780_001.5, 1_764_779_999.25):
        record.created, record.msecs = created, (created - int(created)) * 1000
        expected = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(record.msecs):03d}Z"
        assert json.loads(formatter.format(record))["ts"] == expected
    assert formatter.timestamp(record) == "2025-12-03T16:39:59.250Z"

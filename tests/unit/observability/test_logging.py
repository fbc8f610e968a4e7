import contextvars
import io
import json
import logging

import pytest

from observability.logging import ContextFilter, JsonFormatter, request_id_var, set_serving_model, trace_id_var


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

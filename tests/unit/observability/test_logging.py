import io
import json
import logging

from observability.logging import ContextFilter, JsonFormatter, request_id_var, trace_id_var


def test_json_log_lines_carry_request_and_trace_ids():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("test.json")
    logger.addHandler(handler)
    logger.propagate = False
    token_r, token_t = request_id_var.set("req-1"), trace_id_var.set("abc")
    try:
        logger.warning("served %d texts", 3, extra={"endpoint": "minilm"})
    finally:
        request_id_var.reset(token_r)
        trace_id_var.reset(token_t)
        logger.removeHandler(handler)
    entry = json.loads(stream.getvalue())
    assert entry["msg"] == "served 3 texts" and entry["level"] == "WARNING"
    assert entry["request_id"] == "req-1" and entry["trace_id"] == "abc" and entry["endpoint"] == "minilm"


def test_log_lines_name_the_model_version_and_its_run_once_set():
    import contextvars

    from observability.logging import set_serving_model

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("test.model")
    logger.addHandler(handler)
    logger.propagate = False

    def request() -> None:
        set_serving_model("emb", "3", "run-abc")
        logger.warning("inside")

    contextvars.copy_context().run(request)
    logger.warning("outside")
    logger.removeHandler(handler)
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert (inside["endpoint"], inside["version"], inside["run_id"]) == ("emb", "3", "run-abc")
    assert "version" not in outside, "another request's model never leaks into a line"

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

"""OpenTelemetry: a served request's span reaches a real OTLP/HTTP receiver and joins the caller's trace."""

from __future__ import annotations

import http.server
import threading
import time

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from services.launcher import free_port
from tests.conftest import start_http_stack

pytestmark = pytest.mark.integration


class Receiver(http.server.BaseHTTPRequestHandler):
    spans: list = []

    def do_POST(self):  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers["content-length"]))
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            service = next(a.value.string_value for a in resource.resource.attributes if a.key == "service.name")
            for scope in resource.scope_spans:
                for span in scope.spans:
                    Receiver.spans.append((service, span.trace_id.hex(), span.name))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_request_span_is_exported_and_joins_the_incoming_trace(tmp_path, tiny_model):
    port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {
        "SERVING_OBSERVABILITY__TRACING": "true",
        "SERVING_OBSERVABILITY__OTLP_ENDPOINT": f"http://127.0.0.1:{port}/v1/traces",
    }
    stack = start_http_stack(tmp_path, tiny_model, env=env)
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    try:
        with stack.client() as client:
            response = client.post("/serve/minilm", json={"text": "trace me"},
                                   headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"})
        assert response.status_code == 200
        deadline = time.monotonic() + 15  # the batch span processor exports every few seconds
        while time.monotonic() < deadline and not any(t == trace_id for _, t, _ in Receiver.spans):
            time.sleep(0.2)
    finally:
        stack.launcher.stop_all()
        server.shutdown()
    assert ("fastapi", trace_id, "POST /serve") in Receiver.spans

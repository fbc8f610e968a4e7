"""OpenTelemetry: a served request's span reaches a real OTLP/HTTP receiver and joins the caller's trace."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from services.launcher import free_port
from services.triton.repository import RenderOptions
from tests.support.servers import start_gateway, start_http_stack, start_triton


class Receiver(http.server.BaseHTTPRequestHandler):
    spans: list = []

    def do_POST(self):  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers["content-length"]))
        if "json" in self.headers.get("content-type", ""):  # Triton posts OTLP/JSON: ids are hex strings there
            for resource in json.loads(body)["resourceSpans"]:
                attributes = resource["resource"]["attributes"]
                service = next(a["value"]["stringValue"] for a in attributes if a["key"] == "service.name")
                for scope in resource["scopeSpans"]:
                    for span in scope["spans"]:
                        Receiver.spans.append((service, span["traceId"].lower(), span["name"]))
        else:  # the Python SDK posts protobuf
            request = ExportTraceServiceRequest.FromString(body)
            for resource in request.resource_spans:
                attributes = resource.resource.attributes
                service = next(a.value.string_value for a in attributes if a.key == "service.name")
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        Receiver.spans.append((service, span.trace_id.hex(), span.name))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{port}/v1/traces"
    server.shutdown()


def wait_for(predicate, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds  # batch span processors export every few seconds
    while time.monotonic() < deadline and not predicate():
        time.sleep(0.2)


def test_request_span_is_exported_and_joins_the_incoming_trace(tmp_path, tiny_model, receiver):
    env = {"SERVING_OBSERVABILITY__TRACING": "true", "SERVING_OBSERVABILITY__OTLP_ENDPOINT": receiver}
    stack = start_http_stack(tmp_path, tiny_model, env=env)
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    try:
        with stack.client() as client:
            response = client.post(
                "/serve/minilm",
                json={"text": "trace me"},
                headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"},
            )
        assert response.status_code == 200
        wait_for(lambda: any(t == trace_id for _, t, _ in Receiver.spans))
    finally:
        stack.launcher.stop_all()
    assert ("fastapi", trace_id, "POST /serve") in Receiver.spans


def test_one_trace_runs_from_the_caller_through_the_gateway_into_triton(tmp_path, tiny_model, receiver):
    from services.stacks import triton_tracing_args

    triton = start_triton(
        tmp_path / "triton", tiny_model, RenderOptions(), models=("encoder",), extra_args=triton_tracing_args(receiver)
    )
    gateway = start_gateway(
        tmp_path / "gw",
        tiny_model,
        triton,
        workers=1,
        env={"GATEWAY_OBSERVABILITY__TRACING": "true", "GATEWAY_OBSERVABILITY__OTLP_ENDPOINT": receiver},
    )
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    try:
        with gateway.client() as client:
            response = client.post(
                "/serve/minilm",
                json={"text": "trace me through"},
                headers={"traceparent": f"00-{trace_id}-b7ad6b7169203331-01"},
            )
        assert response.status_code == 200
        wait_for(lambda: {s for s, t, _ in Receiver.spans if t == trace_id} >= {"gateway", "triton"})
    finally:
        gateway.launcher.stop_all()
        triton.stop()
    services = {service for service, t, _ in Receiver.spans if t == trace_id}
    assert services >= {"gateway", "triton"}, Receiver.spans

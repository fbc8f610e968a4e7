"""The span store keeps the newest spans within its bound; the receiver decodes what the SDKs (protobuf) and Triton
(OTLP/JSON) send, and refuses what is not an export or too large."""

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from starlette.testclient import TestClient

from services.analysis.receiver import create_app
from services.analysis.spans import Span
from services.analysis.store import SpanStore


def spans(n: int, offset: int = 0) -> list[Span]:
    return [Span(f"{i:032x}", f"{i:016x}", "", "svc", "op", i, i + 10) for i in range(offset, offset + n)]


def test_the_store_drops_the_oldest_spans_past_its_bound(tmp_path):
    store = SpanStore(tmp_path / "spans.db", max_spans=1000)
    store.add(spans(800))
    store.add(spans(700, offset=800))
    kept = store.spans()
    assert len(kept) <= 1000 and store.count == len(kept)
    assert max(s.start_ns for s in kept) == 1499 and min(s.start_ns for s in kept) > 0, "the newest are kept"
    store.close()
    assert SpanStore(tmp_path / "spans.db").count == len(kept), "the count survives a restart"


def test_the_receiver_stores_protobuf_and_json_exports_and_refuses_junk(tmp_path):
    store = SpanStore(tmp_path / "spans.db")
    client = TestClient(create_app(store, max_body=4096))
    request = ExportTraceServiceRequest()
    resource = request.resource_spans.add()
    attribute = resource.resource.attributes.add()
    attribute.key, attribute.value.string_value = "service.name", "gateway"
    span = resource.scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = bytes(range(16)), bytes(range(8)), "POST /serve"
    span.start_time_unix_nano, span.end_time_unix_nano = 10, 20
    ok = client.post(
        "/v1/traces", content=request.SerializeToString(), headers={"content-type": "application/x-protobuf"}
    )
    assert ok.status_code == 200
    document = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "triton"}}]},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "00" * 16,
                                "spanId": "11" * 8,
                                "name": "InferRequest",
                                "startTimeUnixNano": "1",
                                "endTimeUnixNano": "2",
                            }
                        ]
                    }
                ],
            }
        ]
    }
    assert client.post("/v1/traces", json=document).status_code == 200
    stored = {(s.service, s.name, s.trace_id) for s in store.spans()}
    assert stored == {("gateway", "POST /serve", bytes(range(16)).hex()), ("triton", "InferRequest", "00" * 16)}
    bad = client.post("/v1/traces", content=b"not protobuf at all", headers={"content-type": "application/x-protobuf"})
    assert bad.status_code == 400 and "not an OTLP trace export" in bad.json()["error"]
    big = client.post("/v1/traces", content=b"x" * 5000, headers={"content-type": "application/x-protobuf"})
    assert big.status_code == 413
    assert client.get("/health").json() == {"spans": 2}

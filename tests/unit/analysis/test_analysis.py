"""The decomposition and the verdict over span trees shaped like the real ones (gateway stages over Triton's
InferRequest / model / compute spans; the ensemble's composing models), with known stage times."""

import json

import pytest

from services.analysis.decompose import decompose, decompose_all
from services.analysis.spans import Span, from_jaeger, from_otlp_json
from services.analysis.verdict import analyze

MS = 1_000_000


class Trace:
    def __init__(self, trace_id: str, rate: float | None = None):
        self.trace_id, self.rate, self.spans, self.next = trace_id, rate, [], 1

    def span(self, parent, service, name, start, end, events=None, attributes=None) -> Span:
        span = Span(
            self.trace_id,
            f"{self.next:016x}",
            parent.span_id if parent else "",
            service,
            name,
            int(start * MS),
            int(end * MS),
            attributes or {},
            {k: int(v * MS) for k, v in (events or {}).items()},
        )
        self.next += 1
        self.spans.append(span)
        return span


def triton_model(trace, parent, name, start, queue_ms, infer_ms):
    """A model span with its compute span: queued `queue_ms`, then 0.1 ms input, `infer_ms`, 0.1 ms output."""
    compute_start = start + queue_ms
    end = compute_start + 0.2 + infer_ms
    model = trace.span(parent, "triton", name, start, end, {"QUEUE_START": start}, {"triton.model_name": name})
    events = {
        "COMPUTE_START": compute_start,
        "COMPUTE_INPUT_END": compute_start + 0.1,
        "COMPUTE_OUTPUT_START": compute_start + 0.1 + infer_ms,
        "COMPUTE_END": end,
    }
    trace.span(model, "triton", "compute", compute_start, end, events)
    return end


def gateway_trace(trace_id, preprocess_ms=0.3, queue_ms=0.5, infer_ms=2.0, rate=None) -> list[Span]:
    """loadtest -> gateway server span -> parse, preprocess, triton (-> InferRequest -> encoder), postprocess.
    0.4 ms before the handler and 0.2 ms after it; 0.05 ms of the server span outside any stage."""
    t = Trace(trace_id, rate)
    attributes = {"loadtest.rate": rate, "loadtest.attack": "short"} if rate is not None else {}
    client = t.span(None, "loadtest", "loadtest POST", 0, 0, attributes=attributes)
    server = t.span(client, "gateway", "POST /serve", 0.4, 0)
    t.span(server, "gateway", "parse", 0.45, 0.5)
    t.span(server, "gateway", "preprocess", 0.5, 0.5 + preprocess_ms)
    now = 0.5 + preprocess_ms
    stage = t.span(server, "gateway", "triton", now, 0)
    request = t.span(stage, "triton", "InferRequest", now + 0.3, 0)  # 0.3 ms of gRPC client + transfer first
    model_end = triton_model(t, request, "encoder", now + 0.35, queue_ms, infer_ms)
    request.end_ns = int((model_end + 0.05) * MS)
    stage.end_ns = request.end_ns + int(0.2 * MS)  # and 0.2 ms back
    now = stage.end_ns / MS
    t.span(server, "gateway", "postprocess", now, now + 0.1)
    server.end_ns = int((now + 0.1) * MS)
    client.end_ns = server.end_ns + int(0.2 * MS)
    return t.spans


def test_a_gateway_trace_decomposes_into_stages_that_add_up_to_its_latency():
    d = decompose(gateway_trace("a" * 32, preprocess_ms=0.3, queue_ms=0.5, infer_ms=2.0))
    assert d is not None
    assert d.stages["preprocessing (front)"] == pytest.approx(0.3)
    assert d.stages["encoder queue"] == pytest.approx(0.5)
    assert d.stages["encoder infer"] == pytest.approx(2.0)
    assert d.stages["gRPC client + transfer"] == pytest.approx(0.5)  # 0.3 before Triton, 0.2 after
    assert d.stages["before the handler (network, accept queue)"] == pytest.approx(0.6)  # 0.4 in, 0.2 out
    assert sum(d.stages.values()) == pytest.approx(d.total_ms, abs=1e-6)
    assert list(d.stages)[0].startswith("before the handler"), "stages follow the request's path"


def test_an_ensemble_trace_shows_each_models_queue_and_the_hand_offs():
    t = Trace("b" * 32)
    request = t.span(None, "triton", "InferRequest", 0, 10)
    ensemble = t.span(request, "triton", "ensemble", 0.1, 9.9, {"QUEUE_START": 0.1}, {"triton.model_name": "ensemble"})
    tokenizer_end = triton_model(t, ensemble, "tokenizer", 0.2, 4.0, 0.5)
    triton_model(t, ensemble, "encoder", tokenizer_end + 0.3, 0.1, 4.0)
    d = decompose(t.spans)
    assert d.stages["tokenizer queue"] == pytest.approx(4.0)
    assert d.stages["encoder infer"] == pytest.approx(4.0)
    assert d.stages["Triton request handling"] == pytest.approx(0.2)
    assert d.stages["ensemble hand-offs (ensemble)"] > 0.3
    assert sum(d.stages.values()) == pytest.approx(10.0)


def test_expensive_front_preprocessing_is_the_verdict():
    traces = decompose_all([s for i in range(50) for s in gateway_trace(f"{i:032x}", preprocess_ms=6.0)])
    analysis = analyze(traces)
    assert analysis.levels[0].slowest_stage == "preprocessing (front)"
    assert analysis.verdict.startswith("preprocessing (front)") and "WORKERS" in analysis.advice


def test_the_stage_that_grows_with_load_is_the_saturating_resource():
    spans = []
    for i in range(40):  # the encoder's queue grows from 0.2 ms to 9 ms between the two load levels
        spans += gateway_trace(f"{i:032x}", queue_ms=0.2, rate=50.0)
        spans += gateway_trace(f"{i + 100:032x}", queue_ms=9.0, rate=400.0)
    analysis = analyze(decompose_all(spans))
    assert [level.rate for level in analysis.levels] == [50.0, 400.0]
    assert analysis.growing_stage == "encoder queue" and analysis.growth_ms == pytest.approx(8.8)
    assert "queue in Triton for the encoder" in analysis.verdict
    assert "instance_group" in analysis.advice and "max_queue_delay_microseconds" in analysis.advice


def test_a_queue_at_the_ensembles_tokenizer_is_the_studys_claim():
    spans = []
    for i in range(30):
        t = Trace(f"{i:032x}")
        request = t.span(None, "triton", "InferRequest", 0, 20)
        ensemble = t.span(request, "triton", "ensemble", 0.1, 19.9, {}, {"triton.model_name": "ensemble"})
        end = triton_model(t, ensemble, "tokenizer", 0.2, 12.0, 0.5)
        triton_model(t, ensemble, "encoder", end + 0.1, 0.5, 5.0)
        spans += t.spans
    analysis = analyze(decompose_all(spans))
    assert "tokenizer instance is the bottleneck" in analysis.verdict


def test_no_traces_is_a_clear_error():
    with pytest.raises(ValueError, match="TRACES=1"):
        analyze([])


def test_otlp_json_and_jaeger_exports_read_as_the_same_spans():
    otlp = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "triton"}}]},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "AB" * 16,
                                "spanId": "01" * 8,
                                "parentSpanId": "",
                                "name": "InferRequest",
                                "startTimeUnixNano": "1000",
                                "endTimeUnixNano": "5000",
                                "events": [{"name": "HTTP_RECV_START", "timeUnixNano": "1100"}],
                                "attributes": [{"key": "triton.model_version", "value": {"intValue": "1"}}],
                            }
                        ]
                    }
                ],
            }
        ]
    }
    jaeger = {
        "data": [
            {
                "traceID": "ab" * 16,
                "processes": {"p1": {"serviceName": "triton"}},
                "spans": [
                    {
                        "traceID": "ab" * 16,
                        "spanID": "01" * 8,
                        "operationName": "InferRequest",
                        "references": [],
                        "startTime": 1,
                        "duration": 4,
                        "processID": "p1",
                        "tags": [],
                        "logs": [{"timestamp": 1, "fields": [{"key": "event", "value": "HTTP_RECV_START"}]}],
                    }
                ],
            }
        ]
    }
    a, b = from_otlp_json(json.loads(json.dumps(otlp)))[0], from_jaeger(jaeger)[0]
    assert (a.trace_id, a.span_id, a.service, a.name) == (b.trace_id, b.span_id, b.service, b.name)
    assert a.duration_ns == b.duration_ns == 4000 and a.attributes["triton.model_version"] == 1
    assert "HTTP_RECV_START" in a.events and "HTTP_RECV_START" in b.events

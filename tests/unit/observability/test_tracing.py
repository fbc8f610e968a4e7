"""Tracing off costs nothing: no provider, spans that record nothing, no trace context sent downstream.
(Tracing on, with a real OTLP receiver, is tested in tests/integration/observability.)"""

from opentelemetry import trace

from observability.tracing import extract_context, get_tracer, inject_headers, setup_tracing, tracing_enabled

INCOMING = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


def test_tracing_off_records_nothing_and_propagates_nothing():
    setup_tracing("unit", enabled=False, endpoint="http://127.0.0.1:9/v1/traces", sampling_ratio=1.0)
    assert not tracing_enabled()
    assert not type(trace.get_tracer_provider()).__module__.startswith("opentelemetry.sdk")
    with get_tracer("unit").start_as_current_span("work") as span:
        assert not span.is_recording()
        assert inject_headers({}) == {}, "no traceparent leaves the process"


def test_incoming_trace_context_is_read_even_when_off():
    parent = trace.get_current_span(extract_context(INCOMING)).get_span_context()
    assert format(parent.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert parent.trace_flags.sampled

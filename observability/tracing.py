"""OpenTelemetry tracing: OTLP/HTTP export, W3C trace-context propagation, parent-based ratio sampling (a caller's
`traceparent` decides for its request; `sampling_ratio` decides for requests that arrive without one).

Tracing is off by default; then no SDK is installed and the API's no-op tracer costs next to nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import propagate, trace
from opentelemetry.context import Context

_enabled = False


def setup_tracing(service_name: str, *, enabled: bool, endpoint: str, sampling_ratio: float) -> None:
    """Install a tracer provider for this process (call once per worker, after fork)."""
    global _enabled
    if not enabled:
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    provider = TracerProvider(
        resource=Resource.create({"service.name": service_name}),
        sampler=ParentBased(TraceIdRatioBased(sampling_ratio)),
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    _enabled = True


def tracing_enabled() -> bool:
    return _enabled


def shutdown_tracing() -> None:
    provider = trace.get_tracer_provider()
    if hasattr(provider, "shutdown"):
        provider.shutdown()


def extract_context(headers: Mapping[str, str]) -> Context:
    """The parent context from incoming W3C `traceparent`/`tracestate` headers."""
    return propagate.extract(headers)


def current_span_sampled() -> bool:
    return trace.get_current_span().get_span_context().trace_flags.sampled


def inject_headers(carrier: dict[str, str]) -> dict[str, str]:
    """Add the current span's `traceparent` to outgoing headers or gRPC metadata, only when the span is sampled:
    Triton traces every request that carries a context, whatever its sampled flag, so an unsampled request must
    reach it without one for the caller's decision to hold."""
    if current_span_sampled():
        propagate.inject(carrier)
    return carrier


def get_tracer(name: str) -> trace.Tracer:
    return trace.get_tracer(name)


def record_span(name: str, start_ns: int, end_ns: int, attributes: dict | None = None) -> None:
    """A finished child span of the current (sampled) span, with times measured elsewhere."""
    if _enabled and current_span_sampled():
        span = get_tracer("serving.stages").start_span(name, start_time=start_ns, attributes=attributes)
        span.end(end_time=end_ns)

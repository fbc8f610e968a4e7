"""The generator's side of a trace: which requests are sampled (the caller's decision, which every service of the
stack then honours), the W3C `traceparent` that carries it, and a client span per sampled request, so `serving
analyze` can tell the time spent before the server (network, accept queue) from the time inside it.

Sampled requests carry flag 01; the others carry flag 00 when the server honours it (the HTTP stacks: parent-based
sampling) and no context at all when it does not (Triton traces every request that carries one).
"""

from __future__ import annotations

import random
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from opentelemetry import trace
from opentelemetry.trace import SpanKind

_providers: dict = {}
"""OTLP endpoint -> the SDK tracer provider exporting there."""


def traceparent(sampled: bool = True) -> str:
    """A new W3C trace context."""
    return f"00-{random.getrandbits(128):032x}-{random.getrandbits(64):016x}-{'01' if sampled else '00'}"


def _tracer(endpoint: str) -> trace.Tracer:
    """One SDK tracer provider per process and endpoint (the attack's processes each build their own)."""
    if endpoint not in _providers:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=Resource.create({"service.name": "loadtest"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint), max_queue_size=65536))
        _providers[endpoint] = provider
    return _providers[endpoint].get_tracer("loadtest")


def flush() -> None:
    """Export every client span still queued (the end of an attack)."""
    for provider in _providers.values():
        provider.force_flush()


DEFAULT_RECEIVER = "http://127.0.0.1:4318/v1/traces"
"""The stack's own receiver on its default port (`make up TRACES=1`)."""


def local_receiver(run_dir: Path | None = None) -> str | None:
    """Where the stack `serving up` started in the run directory (SERVING_RUN_DIR) collects its spans, when it does
    and its receiver answers: never another run's receiver. With no stack recorded there, the default receiver when
    one answers."""
    from services.common.settings import RunSettings
    from services.launcher.records import read_stack_info

    run_dir = RunSettings().run_dir if run_dir is None else run_dir
    info = read_stack_info(run_dir)
    url = info.get("urls", {}).get("traces") if info else DEFAULT_RECEIVER
    if not url:
        return None
    try:
        with urllib.request.urlopen(url.removesuffix("/v1/traces") + "/health", timeout=0.5) as response:
            return url if response.status == 200 else None
    except OSError:
        return None


@dataclass
class ClientTracing:
    ratio: float = 0.0
    unsampled_context: bool = True
    """Send flag-00 contexts with unsampled requests (False for Triton, which would trace them)."""
    endpoint: str | None = None
    """Where the client spans go (OTLP/HTTP); None: headers only."""
    attributes: dict | None = None
    """Put on every client span (the attack's name and offered rate: `serving analyze` groups by them)."""

    def start(self, method: str, url: str, due_ns: int) -> tuple[dict[str, str], trace.Span | None]:
        """Headers to add, and the client span to end when the answer arrives (None when not sampled)."""
        if not self.ratio:
            return {}, None
        if random.random() >= self.ratio:
            return ({"traceparent": traceparent(sampled=False)} if self.unsampled_context else {}), None
        if self.endpoint is None:
            return {"traceparent": traceparent()}, None
        span = _tracer(self.endpoint).start_span(
            f"loadtest {method}",
            kind=SpanKind.CLIENT,
            start_time=due_ns,
            attributes={"url.full": url, **(self.attributes or {})},
        )
        context = span.get_span_context()
        return {"traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-01"}, span


def client_tracing(ratio: float, fmt: str, endpoint: str | None, attributes: dict) -> ClientTracing | None:
    """The attack's tracing for a request format: none at ratio 0; no context at all with unsampled requests to
    Triton (the kserve format goes to it directly, and it traces any request that carries one); client spans to
    `endpoint`, or to the stack's own receiver when one is up."""
    if not ratio:
        return None
    return ClientTracing(ratio, fmt != "kserve", endpoint or local_receiver(), attributes)

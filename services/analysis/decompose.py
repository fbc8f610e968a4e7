"""Where the time of one request goes: a trace's spans turned into named, non-overlapping stages.

The spans come from every hop: the load generator's client span (`loadtest POST`), the HTTP front's server span
(gateway or FastAPI: `POST /serve`) with one child per stage (`parse`, `preprocess`, `triton`/`inference`,
`postprocess`: `observability.metrics.stage`), and Triton's own (OpenTelemetry mode): `InferRequest`, one span per
model (ensemble and composing models) with QUEUE_START, and under each a `compute` span with COMPUTE_START,
COMPUTE_INPUT_END, COMPUTE_OUTPUT_START, COMPUTE_END. Each stage is what one hop adds beyond the hops inside it, so
the stages of a trace add up to its end-to-end time.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from services.analysis.spans import Span

FRONT_STAGES = {
    "parse": "JSON parse",
    "preprocess": "preprocessing (front)",
    "postprocess": "postprocess + serialisation",
    "coalesce wait": "waiting for a batch (front)",
    "batch": "coalesced batch (tokenize + backend)",
}
BACKEND_STAGES = ("triton", "inference")
MS = 1e-6


@dataclass
class Decomposition:
    trace_id: str
    total_ms: float
    stages: dict[str, float] = field(default_factory=dict)
    """Stage -> milliseconds, in the order of the request's path."""
    attributes: dict = field(default_factory=dict)
    """The client span's attributes (the attack and its offered rate), when the trace has one."""


def _ms(end: int, start: int) -> float:
    return max(0.0, (end - start) * MS)


def _add(stages: dict[str, float], name: str, value: float) -> None:
    stages[name] = stages.get(name, 0.0) + value


def _triton(request: Span, children: dict[str, list[Span]], stages: dict[str, float]) -> None:
    """Triton's part: its protocol handling, the ensemble's hand-offs, each model's queue and compute."""
    models = children.get(request.span_id, [])
    inside = sum(m.duration_ns for m in models) * MS
    _add(stages, "Triton request handling", max(0.0, request.duration_ns * MS - inside))
    for model in models:
        _model(model, children, stages)


def _model(model: Span, children: dict[str, list[Span]], stages: dict[str, float]) -> None:
    name = model.attributes.get("triton.model_name", model.name)
    kids = children.get(model.span_id, [])
    composing = [k for k in kids if k.name != "compute"]
    if composing:  # an ensemble: what its steps do not cover is scheduling between them
        steps = sum(k.duration_ns for k in composing) * MS
        _add(stages, f"ensemble hand-offs ({name})", max(0.0, model.duration_ns * MS - steps))
        for step in composing:
            _model(step, children, stages)
        return
    compute = next((k for k in kids if k.name == "compute"), None)
    queued = model.events.get("QUEUE_START", model.start_ns)
    if compute is None or "COMPUTE_START" not in compute.events:
        _add(stages, f"{name} (untimed)", model.duration_ns * MS)
        return
    ev = compute.events
    _add(stages, f"{name} queue", _ms(ev["COMPUTE_START"], queued))
    _add(stages, f"{name} compute input", _ms(ev.get("COMPUTE_INPUT_END", ev["COMPUTE_START"]), ev["COMPUTE_START"]))
    infer_start = ev.get("COMPUTE_INPUT_END", ev["COMPUTE_START"])
    infer_end = ev.get("COMPUTE_OUTPUT_START", ev.get("COMPUTE_END", infer_start))
    _add(stages, f"{name} infer", _ms(infer_end, infer_start))
    _add(stages, f"{name} compute output", _ms(ev.get("COMPUTE_END", infer_end), infer_end))
    rest = model.duration_ns * MS - _ms(ev.get("COMPUTE_END", infer_end), queued)
    _add(stages, f"{name} queue", max(0.0, rest))  # request start to queue, and release: Triton's scheduling


def _front(server: Span, children: dict[str, list[Span]], stages: dict[str, float]) -> None:
    """The HTTP front (gateway or FastAPI): its stages, and what none of them covers (routing, middleware)."""
    kids = children.get(server.span_id, [])
    covered = 0.0
    for kid in sorted(kids, key=lambda s: s.start_ns):
        covered += kid.duration_ns * MS
        if kid.name in FRONT_STAGES:
            _add(stages, FRONT_STAGES[kid.name], kid.duration_ns * MS)
        elif kid.name in BACKEND_STAGES:
            requests = [c for c in children.get(kid.span_id, []) if c.name == "InferRequest"]
            if requests:  # the gateway's call into Triton: the client, gRPC and transfer are what Triton does not see
                inner = sum(r.duration_ns for r in requests) * MS
                _add(stages, "gRPC client + transfer", max(0.0, kid.duration_ns * MS - inner))
                for request in requests:
                    _triton(request, children, stages)
            else:
                name = "inference (in-process)" if kid.name == "inference" else "Triton call"
                _add(stages, name, kid.duration_ns * MS)
        else:
            _add(stages, f"{kid.name} (front)", kid.duration_ns * MS)
    _add(stages, "HTTP handling (front)", max(0.0, server.duration_ns * MS - covered))


def decompose(spans: list[Span]) -> Decomposition | None:
    """One trace's stages; None when the trace has no span that a request enters by (incomplete export)."""
    by_id = {s.span_id: s for s in spans}
    children: dict[str, list[Span]] = defaultdict(list)
    for s in spans:
        if s.parent_id in by_id:
            children[s.parent_id].append(s)
    client = next((s for s in spans if s.service == "loadtest"), None)
    entry = [s for s in spans if s.parent_id not in by_id or (client is not None and s.parent_id == client.span_id)]
    entry = [s for s in entry if s is not client]
    server = next((s for s in entry if s.name == "InferRequest" or s.name.startswith(("POST", "GET"))), None)
    if server is None:
        return None
    stages: dict[str, float] = {}
    total = server.duration_ns * MS
    if client is not None:
        total = client.duration_ns * MS
        _add(stages, "before the handler (network, accept queue)", max(0.0, total - server.duration_ns * MS))
    if server.name == "InferRequest":
        _triton(server, children, stages)
    else:
        _front(server, children, stages)
    return Decomposition(server.trace_id, total, stages, dict(client.attributes) if client else {})


def decompose_all(spans: list[Span]) -> list[Decomposition]:
    traces: dict[str, list[Span]] = defaultdict(list)
    for s in spans:
        traces[s.trace_id].append(s)
    found = (decompose(group) for group in traces.values())
    return [d for d in found if d is not None]

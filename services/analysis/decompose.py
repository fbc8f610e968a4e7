"""Where the time of one request goes: a trace's spans turned into named, non-overlapping stages.

The spans come from every hop: the load generator's client span (`loadtest POST`), the HTTP front's server span
(gateway or FastAPI: `POST /serve`) with one child per stage (`parse`, `preprocess`, `triton`/`inference`,
`postprocess`: `observability.metrics.stage`), and Triton's own (OpenTelemetry mode): `InferRequest`, one span per
model (ensemble and composing models) with QUEUE_START, and under each a `compute` span with COMPUTE_START,
COMPUTE_INPUT_END, COMPUTE_OUTPUT_START, COMPUTE_END. Each stage is what one hop adds beyond the hops inside it,
within its parent's time (`services.analysis.segments`), so the stages of a trace partition its end-to-end time
exactly. Requests that failed (the client span's status) are counted by outcome, not decomposed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from services.analysis.segments import MS, Segment, partition
from services.analysis.spans import Span

COALESCE_WAIT = "waiting for the worker's next batch (front)"
"""A request joining its worker's coalesced batch, until that batch starts."""
RIDING = "in another request's batch (tokenize + backend)"
"""A request whose texts went in a batch another request carried: that request's trace has the batch's own stages
(tokenization, the backend call), this one only the time it took."""
FRONT_STAGES = {
    "parse": "JSON parse",
    "preprocess": "preprocessing (front)",
    "postprocess": "postprocess + serialisation",
    "coalesce wait": COALESCE_WAIT,
    "batch": RIDING,
}
BACKEND_STAGES = ("triton", "inference")
BEFORE = "before the handler (network, accept queue)"
OK = "ok"
INCOMPLETE = "incomplete trace (no server span arrived)"


@dataclass
class Decomposition:
    trace_id: str
    total_ms: float
    stages: dict[str, float] = field(default_factory=dict)
    """Stage -> milliseconds, in the order of the request's path; they add up to `total_ms` exactly."""
    attributes: dict = field(default_factory=dict)
    """The client span's attributes (the attack and its offered rate), when the trace has one."""
    outcome: str = OK
    """"ok", or how the request failed: "timeout", "HTTP 429", "no answer (...)", "incomplete trace" (a client span
    whose server spans never arrived). Failed requests are counted, not decomposed (`stages` is empty)."""
    clipped: dict[str, float] = field(default_factory=dict)
    """Stage -> milliseconds its spans ran outside their parent's span (Triton's compute output after the response):
    not counted in any stage, so that the stages partition the end-to-end time."""

    @property
    def ok(self) -> bool:
        return self.outcome == OK


def _leaf_model(model: Span, name: str, kids: list[Span]) -> Segment:
    """A model that runs itself: its queue (from QUEUE_START, and Triton's scheduling around the execution), then
    the compute span's input, infer and output stretches from its events."""
    compute = next((k for k in kids if k.name == "compute"), None)
    if compute is None or "COMPUTE_START" not in compute.events:
        return Segment(f"{name} (untimed)", model.start_ns, model.end_ns)
    ev = compute.events
    input_end = ev.get("COMPUTE_INPUT_END", ev["COMPUTE_START"])
    output_start = ev.get("COMPUTE_OUTPUT_START", ev.get("COMPUTE_END", input_end))
    output_end = ev.get("COMPUTE_END", output_start)
    return Segment(
        f"{name} queue",
        model.start_ns,
        model.end_ns,
        [
            Segment(f"{name} compute input", ev["COMPUTE_START"], input_end),
            Segment(f"{name} infer", input_end, output_start),
            Segment(f"{name} compute output", output_start, output_end),
        ],
    )


def _model(model: Span, children: dict[str, list[Span]]) -> Segment:
    name = model.attributes.get("triton.model_name", model.name)
    kids = children.get(model.span_id, [])
    composing = [k for k in kids if k.name != "compute"]
    if composing:  # an ensemble: what its steps do not cover is scheduling between them
        steps = [_model(step, children) for step in composing]
        return Segment(f"ensemble hand-offs ({name})", model.start_ns, model.end_ns, steps)
    return _leaf_model(model, name, kids)


def _triton(request: Span, children: dict[str, list[Span]]) -> Segment:
    """Triton's part: its protocol handling (what no model span covers), each model's queue and compute."""
    models = [_model(m, children) for m in children.get(request.span_id, [])]
    return Segment("Triton request handling", request.start_ns, request.end_ns, models)


def _front_stage(kid: Span, children: dict[str, list[Span]]) -> Segment:
    if kid.name in FRONT_STAGES:
        return Segment(FRONT_STAGES[kid.name], kid.start_ns, kid.end_ns)
    if kid.name in BACKEND_STAGES:
        requests = [c for c in children.get(kid.span_id, []) if c.name == "InferRequest"]
        if requests:  # the gateway's call into Triton: the client, gRPC and transfer are what Triton does not see
            inner = [_triton(r, children) for r in requests]
            return Segment("gRPC client + transfer", kid.start_ns, kid.end_ns, inner)
        name = "inference (in-process)" if kid.name == "inference" else "Triton call"
        return Segment(name, kid.start_ns, kid.end_ns)
    return Segment(f"{kid.name} (front)", kid.start_ns, kid.end_ns)


def _front(server: Span, children: dict[str, list[Span]]) -> Segment:
    """The HTTP front (gateway or FastAPI): its stages, and what none of them covers (routing, middleware)."""
    stages = [_front_stage(kid, children) for kid in children.get(server.span_id, [])]
    return Segment("HTTP handling (front)", server.start_ns, server.end_ns, stages)


def outcome(span: Span | None) -> str:
    """How the request this client (or server) span stands for ended, from its status attributes."""
    if span is None:
        return OK
    code = span.attributes.get("http.response.status_code")
    error = span.attributes.get("error.type")
    if code in (None, "") and not error:
        return OK
    code = int(code or 0)
    if 0 < code < 400:
        return OK
    if code:
        return f"HTTP {code}"
    return "timeout" if error == "timeout" else f"no answer ({error or 'timeout or connection error'})"


def decompose(spans: list[Span]) -> Decomposition | None:
    """One trace's stages; None when the trace has no span a request enters by (an incomplete export). A trace
    whose request failed, or whose server spans are missing, comes back with its outcome and no stages."""
    by_id = {s.span_id: s for s in spans}
    children: dict[str, list[Span]] = defaultdict(list)
    for s in spans:
        if s.parent_id in by_id:
            children[s.parent_id].append(s)
    client = next((s for s in spans if s.service == "loadtest"), None)
    entry = [s for s in spans if s.parent_id not in by_id or (client is not None and s.parent_id == client.span_id)]
    entry = [s for s in entry if s is not client]
    server = next((s for s in entry if s.name == "InferRequest" or s.name.startswith(("POST", "GET"))), None)
    attributes = dict(client.attributes) if client else {}
    root = client or server
    if root is None:
        return None
    ended = outcome(root)
    total = max(0, root.end_ns - root.start_ns) * MS
    if server is None or ended != OK:
        return Decomposition(root.trace_id, total, {}, attributes, ended if ended != OK else INCOMPLETE)
    inner = _triton(server, children) if server.name == "InferRequest" else _front(server, children)
    if client is not None:
        inner = Segment(BEFORE, client.start_ns, client.end_ns, [inner])
    stages, clipped = partition(inner)
    return Decomposition(root.trace_id, total, stages, attributes, OK, clipped)


def decompose_all(spans: list[Span]) -> list[Decomposition]:
    traces: dict[str, list[Span]] = defaultdict(list)
    for s in spans:
        traces[s.trace_id].append(s)
    found = (decompose(group) for group in traces.values())
    return [d for d in found if d is not None]

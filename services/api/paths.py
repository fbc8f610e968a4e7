"""The serving API's route table, the one place that knows it: the route declarations (`serve_route`, `routes`, `v2`)
take their paths from here, and every rule that sorts requests by path asks here: which requests run a model
(admission bounds only those), which need an API key (auth), the route label of the access metrics (the edge), and
the endpoint and version a `/serve` path names (the fast path)."""

from __future__ import annotations

from services.common.names import printable

SERVE = "/serve/{endpoint}"
SERVE_VERSION = "/serve/{endpoint}/{version}"
EMBEDDINGS = "/v1/embeddings"
MODELS = "/v1/models"
MODEL = "/v1/models/{model}"
V2 = "/v2"
"""The Open Inference Protocol's prefix; its routes below are relative to it (`v2.router`)."""
V2_INFER = "/models/{model}/infer"
V2_VERSION_INFER = "/models/{model}/versions/{version}/infer"
HEALTH_LIVE = "/health/live"
HEALTH_READY = "/health/ready"
METRICS = "/metrics"

_SERVE_PREFIX = "/serve/"
_V2_MODELS = V2 + "/models/"
_INFER = "/infer"

PROTECTED = (_SERVE_PREFIX, "/v1/", V2 + "/")
"""Prefixes of the routes an API key guards when keys are configured (`/metrics` too, if asked for)."""
UNMETERED = (METRICS, "/health")
"""Prefixes of the routes left out of the access metrics and traces: scrapes and probes would drown the traffic."""


PATH_SHOWN = 120
"""The most characters of a request's path a log line, a span or an error body carries."""


def shown_path(path: str) -> str:
    """A request's path as a log line or an error body may carry it: cut at `PATH_SHOWN` characters, control
    characters escaped (the path is the client's, up to the server's request-line limit)."""
    return printable(path, PATH_SHOWN)


def is_inference(method: str, path: str) -> bool:
    """The routes that run a model (the only ones admission bounds: health, metrics and admin always answer)."""
    return method == "POST" and (
        path.startswith((_SERVE_PREFIX, "/v1/")) or (path.startswith(_V2_MODELS) and path.endswith(_INFER))
    )


def route_label(path: str) -> str:
    """The `route` label of the access metrics and the span name: one per protocol, so paths cannot add series."""
    if path.startswith(_SERVE_PREFIX):
        return "/serve"
    if path.startswith(V2 + "/"):
        return V2
    if path == EMBEDDINGS:
        return path
    return "other"


def serve_target(path: str) -> tuple[str, str | None] | None:
    """(endpoint, version or None) of a `/serve/{endpoint}[/{version}]` path (`/serve/name/` is `/serve/name`);
    None for any other path, which FastAPI then answers (its 404 included)."""
    if not path.startswith(_SERVE_PREFIX):
        return None
    parts = path[len(_SERVE_PREFIX) :].rstrip("/").split("/")
    if not 1 <= len(parts) <= 2 or not all(parts):
        return None
    return parts[0], parts[1] if len(parts) == 2 else None

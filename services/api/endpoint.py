"""What `/serve/{endpoint}` names, and where endpoints come from: the one definition of each.

- An `Endpoint` answers a request with its `run(call, predict)`. There are two kinds, and the data plane tells them
  apart by class (`isinstance`), as KServe's does: a `ModelEndpoint` holds one or more live versions and picks the
  one that answers (its traffic policy), its texts run through the data plane's `predict`; a `PipelineEndpoint` is
  clearml-serving's preprocess -> engine -> postprocess over the raw body. Each kind's `run` is defined here, once:
  it names the version on the request's log lines, counts and times the endpoint's requests, and records the
  statistics declared for it (docs/decisions/endpoint-run.md). A subclass supplies only what differs.
- `Endpoints` is one immutable snapshot of endpoints by name, with the entries left out (and why), the custom
  statistics declared per endpoint name and the versions being loaded per endpoint name; `Endpoints()` is the empty
  one.
- An `EndpointSource` gives the snapshot it serves now (a watched endpoint file, the deployment state); the
  `catalog` chains a server's sources.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from observability import metrics
from observability.logging import set_serving_model
from observability.metrics import stage
from services.api.body import parse_json, validate
from services.api.payloads import dumps, dumps_any, model_payload, pipeline_body
from services.api.predictor import PREPROCESS, Prediction
from services.common.backend import Answer, Collect, Predict, ServeCall, ServedModel
from services.common.errors import NotFound, Unavailable
from services.common.names import shown
from services.common.schemas import ServeRequest
from services.monitoring import statistics
from services.monitoring.statistics import EndpointMetrics

log = logging.getLogger(__name__)

PARSE, POSTPROCESS = "parse", "postprocess"

LOADING_RETRY_AFTER_S = 2.0
"""What a request for a version being loaded is told to wait (Retry-After): Triton loads a version in seconds, and
gateways follow the deployment state within their poll interval."""


def still_loading(endpoint: str, versions: Sequence[str]) -> Unavailable:
    """The 503 for an endpoint, or a version of it, that is deployed but not served yet (Triton is loading it)."""
    return Unavailable(
        f"endpoint {shown(endpoint)} is being loaded (version {', '.join(versions)}) and answers within seconds; "
        f"retry after {LOADING_RETRY_AFTER_S:g} s",
        retry_after=LOADING_RETRY_AFTER_S,
    )


class Endpoint(ABC):
    """What `/serve/{endpoint}` names. Its `name` is the name it is served under: its metrics and logs carry it."""

    name: str

    @abstractmethod
    async def run(self, call: ServeCall, predict: Predict) -> Answer:
        """Answer one request; raises ServingError subclasses (an error in user code is the request's error)."""

    def unload(self) -> None:
        """Release what it loaded (user code's unload()), once no request uses it any more; nothing by default."""
        return None


class ModelEndpoint(Endpoint):
    """A text model: `choose` picks the version, its texts go through `predict`. The protocols that name a model
    (OpenAI, Open Inference) run only these."""

    @abstractmethod
    def choose(self, version: str | None, routing_key: str | None) -> ServedModel:
        """`version` if it is live (else NotFound naming the live ones), or the one the traffic policy picks; the
        same `routing_key` picks the same version while the policy stays the same."""

    @abstractmethod
    def versions(self) -> list[str]:
        """The live versions."""

    async def run(self, call: ServeCall, predict: Predict) -> Answer:
        model = self.choose(call.version, call.routing_key)  # the version asked for, or the policy's pick
        set_serving_model(self.name, model.version, model.run_id)  # the request's own context: gone when it ends
        with metrics.endpoint_request(self.name, model.version):
            with stage(PARSE):
                body = validate(ServeRequest, parse_json(await call.read()))
            prediction: Prediction = await predict(model, body.batch, body.truncate)
            with stage(POSTPROCESS):
                payload = model_payload(model, prediction, body.text is not None)
                if call.declared is not None:  # the request's fields are copied out only when variables may read them
                    statistics.record(self.name, model.version, call.declared, None, payload, body.model_dump())
                return Answer(dumps(payload), model.manifest.name, model.version, prediction.device)


class SingleModelEndpoint(ModelEndpoint):
    """An endpoint with one version: the stack's built-in model."""

    def __init__(self, model: ServedModel):
        self.name = model.endpoint
        self.model = model

    def choose(self, version: str | None, routing_key: str | None) -> ServedModel:
        if version is not None and version != self.model.version:
            raise NotFound(f"endpoint '{self.name}' has no version {shown(version)}; available: '{self.model.version}'")
        return self.model

    def versions(self) -> list[str]:
        return [self.model.version]


class PipelineEndpoint(Endpoint):
    """User code, in clearml-serving's order: a fresh `state` per request, each step given the previous one's
    result, the request's `state` dict and its `collect` (what it collects feeds the statistics); each step raises
    ServingError subclasses (an error in user code is the request's error, never the worker's). Every step passes
    its data through unless a subclass says otherwise."""

    version: str = "1"
    stage: str = "inference"
    """Name of the stage `process` is timed under (`triton`, `inference`), as `InferenceBackend.stage`."""

    def accept(self, version: str | None) -> None:
        """Raise NotFound unless `version` (from `/serve/{endpoint}/{version}`) is one this endpoint answers."""
        if version is not None and version != self.version:
            raise NotFound(f"endpoint '{self.name}' has no version {shown(version)}; available: '{self.version}'")

    async def preprocess(self, body: Any, state: dict, collect: Collect) -> Any:
        return body

    async def process(self, data: Any, state: dict, collect: Collect) -> Any:
        """The engine's step (the user's `process`, or the declared tensors through Triton or ONNX Runtime)."""
        return data

    async def postprocess(self, data: Any, state: dict, collect: Collect) -> Any:
        """The JSON-able response."""
        return data

    async def run(self, call: ServeCall, predict: Predict) -> Answer:
        with stage(PARSE):
            body = pipeline_body(await call.read(), call.content_type)
        with metrics.endpoint_request(self.name, self.version):
            self.accept(call.version)
            set_serving_model(self.name, self.version, None)  # the request's own context: gone when it ends
            state: dict = {}
            collected: dict = {}

            def collect(values: dict | None) -> None:
                collected.update(values or {})

            with stage(PREPROCESS):
                data = await self.preprocess(body, state, collect)
            with stage(self.stage):
                data = await self.process(data, state, collect)
            with stage(POSTPROCESS):
                data = await self.postprocess(data, state, collect)
            statistics.record(self.name, self.version, call.declared, collected, data, body)
            return Answer(dumps_any(data, self.name), self.name, self.version)


@dataclass(frozen=True)
class Endpoints:
    """An immutable snapshot of endpoints, built in one go from one source and replaced whole when it changes."""

    by_name: Mapping[str, Endpoint] = field(default_factory=dict)
    """Each endpoint under the name it is served as (its own `name`)."""
    errors: Mapping[str, str] = field(default_factory=dict)
    """The source's entries that were left out, and why (key: the endpoint)."""
    declared: Mapping[str, EndpointMetrics] = field(default_factory=dict)
    """Custom statistics the source declares, by endpoint name (for any endpoint of the server)."""
    loading: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Versions the source has but does not serve yet (the deployment state's `loading` phase), by endpoint name: a
    request for such an endpoint that no source serves is a 503 to retry (`still_loading`), not a 404."""

    def names(self) -> list[str]:
        return sorted(self.by_name)

    def unload(self) -> None:
        """Every endpoint's `unload` (the snapshot was replaced, or the worker stops)."""
        for endpoint in self.by_name.values():
            endpoint.unload()


class EndpointSource(ABC):
    """Where endpoints beyond the stack's built-in one come from: the snapshot it serves now."""

    @abstractmethod
    def current(self) -> Endpoints: ...

    def names(self) -> list[str]:
        """Every endpoint it serves now."""
        return self.current().names()

    def errors(self) -> dict[str, str]:
        """Configuration problems: what is not served, and why (for readiness and status output)."""
        return dict(self.current().errors)

    def health(self) -> dict[str, str]:
        """What `/health/ready` adds about the source (the deployment state store's reachability)."""
        return {}

    async def start(self) -> None:
        """Begin following the source."""
        return None

    async def stop(self) -> None:
        """Stop following it and release what it loaded."""
        return None

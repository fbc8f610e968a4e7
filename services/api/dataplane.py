"""The data plane: the protocol-agnostic core that every request running a model or an endpoint's code goes through.

Built from what a stack declares (`services.common.backend`): an optional built-in model, an inference backend and
an endpoint resolver. The protocol edges only translate, and call one of two entries:

- `serve` answers `/serve/{endpoint}[/{version}]`, whose JSON is this API's own (`payloads`): it finds the endpoint
  and its declared statistics (`catalog`) and hands the request to the endpoint's `run`. Every endpoint runs one of
  the two ways defined here: a model endpoint (`ModelRun`) parses the texts and runs the version its policy chooses
  (the version asked for, or the traffic split with the canary key); a pipeline (`PipelineRun`) hands the body to
  its steps. Both name the version on the request's log lines, count and time the endpoint's requests, and record
  the statistics declared for it (docs/decisions/endpoint-run.md).
- `infer` runs a model for another protocol (OpenAI, Open Inference), which parses and renders its own bodies.

Every stage of `serving_stage_duration_seconds` is timed in this module and nowhere else (for a model's texts, in
its `predictor`), so every stack and protocol reports the same stages: parse (read and check the body), preprocess
(tokenize, or a pipeline's preprocess code), the engine (the backend's or pipeline's `stage`: `inference`,
`triton`), postprocess (shape the answer, or a pipeline's postprocess code). Which names resolve to which endpoint is
`catalog`'s business; how a model's texts are admitted, batched and run is `predictor`'s.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from observability import metrics
from observability.logging import set_serving_model
from observability.metrics import stage
from services.api.body import parse_json, validate
from services.api.catalog import Catalog
from services.api.payloads import dumps, dumps_any, model_payload, pipeline_body
from services.api.predictor import PREPROCESS, Prediction, Predictor
from services.common.backend import (
    Answer,
    Collect,
    EndpointKind,
    EndpointResolver,
    InferenceBackend,
    Predict,
    Read,
    ServeCall,
    ServedModel,
)
from services.common.contract import WARMUP_TEXTS
from services.common.errors import NotFound
from services.common.names import shown
from services.common.schemas import ServeRequest
from services.common.settings import ApiSettings
from services.monitoring import statistics

log = logging.getLogger(__name__)

PARSE, POSTPROCESS = "parse", "postprocess"
Rendered = TypeVar("Rendered")
__all__ = ["Answer", "DataPlane", "ModelRun", "PipelineRun", "Prediction", "SingleModelEndpoint"]

Parse = Callable[[], Awaitable[tuple[ServedModel, list[str], Any]]]
"""A protocol's parse step for `infer`: reads its body, returns (the model to run, its texts, the parsed request)."""
Render = Callable[[ServedModel, Prediction, Any], Rendered]
"""A protocol's render step for `infer`: (model, prediction, the parsed request) -> the protocol's response."""


class ModelRun(ABC):
    """The `run` of every `ModelEndpoint`: its `choose` picks the version, the texts go through `predict`."""

    kind = EndpointKind.MODEL
    name: str

    @abstractmethod
    def choose(self, version: str | None, routing_key: str | None) -> ServedModel: ...

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


class PipelineRun(ABC):
    """The `run` of every `PipelineEndpoint`, in clearml-serving's order: a fresh `state` per request, each step
    given the previous one's result; what its code collects feeds the statistics."""

    kind = EndpointKind.PIPELINE
    name: str
    version: str
    stage: str

    @abstractmethod
    def accept(self, version: str | None) -> None: ...

    @abstractmethod
    async def preprocess(self, body: Any, state: dict, collect: Collect) -> Any: ...

    @abstractmethod
    async def process(self, data: Any, state: dict, collect: Collect) -> Any: ...

    @abstractmethod
    async def postprocess(self, data: Any, state: dict, collect: Collect) -> Any: ...

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


class SingleModelEndpoint(ModelRun):
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


class DataPlane:
    """One per worker, built when the app starts (`services.api.app`) and kept in the app's state."""

    def __init__(
        self,
        settings: ApiSettings,
        builtin: ServedModel | None,
        backend: InferenceBackend,
        endpoints: EndpointResolver | None = None,
    ):
        self.settings = settings
        self.catalog = Catalog(SingleModelEndpoint(builtin) if builtin else None, endpoints)
        self.backend = backend
        """The built-in model's backend; what readiness asks."""
        self.ready = False
        self.predictor = Predictor(settings)

    async def warm_up(self) -> bool:
        """Run a few predictions on the built-in model so the first user request is not slow; readiness waits."""
        if self.catalog.builtin:
            try:
                for _ in range(3):
                    await self.predict(self.catalog.builtin.model, WARMUP_TEXTS)
            except Exception as exc:  # noqa: BLE001 - stay not ready; /health/ready retries
                log.warning("warm-up failed, not ready yet: %s", exc)
                return False
        self.ready = True
        return True

    async def is_ready(self) -> bool:
        """Warmed up (retrying the warm-up if it failed, e.g. Triton came up late) and the backend answers."""
        return (self.ready or await self.warm_up()) and await self.backend.ready()

    async def serve(
        self, endpoint: str, version: str | None, read: Read, routing_key: str | None, content_type: str | None
    ) -> Answer:
        """`/serve/{endpoint}[/{version}]`: the body comes from `read`; `routing_key` (the `x-canary-key` header)
        keeps a caller on one version while a canary runs; `content_type` says how a pipeline gets the body."""
        found, declared = self.catalog.find(endpoint)
        return await found.run(ServeCall(version, read, routing_key, content_type, declared), self.predict)

    async def infer(self, parse: Parse, render: Render[Rendered]) -> Rendered:
        """A model run for a protocol of its own: its parse step, the prediction, its render step."""
        with stage(PARSE):
            model, texts, request = await parse()
        prediction = await self.predict(model, texts)
        with stage(POSTPROCESS):
            return render(model, prediction, request)

    async def predict(self, model: ServedModel, texts: list[str], truncate: bool | None = None) -> Prediction:
        """`texts` through `model` (`services.api.predictor`: the token budget, coalescing, bounded backend calls)."""
        return await self.predictor.predict(model, texts, truncate)

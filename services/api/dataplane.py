"""The data plane: the protocol-agnostic core that every request running a model or an endpoint's code goes through.

Built from what a stack declares: an optional built-in model, its inference backend (`services.common.backend`) and
the sources of its other endpoints (`endpoint.EndpointSource`). The protocol edges only translate, and call one of
two entries:

- `serve` answers `/serve/{endpoint}[/{version}]`, whose JSON is this API's own (`payloads`): it finds the endpoint
  and its declared statistics (`catalog`) and hands the request to the endpoint's `run`, which its kind defines
  (`endpoint`): a model endpoint parses the texts and runs the version its policy chooses (the version asked for,
  or the traffic split with the canary key); a pipeline hands the body to its steps. Both name the version on the
  request's log lines, count and time the endpoint's requests, and record the statistics declared for it
  (docs/decisions/endpoint-run.md).
- `infer` runs a model for another protocol (OpenAI, Open Inference), which parses and renders its own bodies.

Every stage of `serving_stage_duration_seconds` is timed here or in the endpoint kinds' runs (for a model's texts,
in its `predictor`), so every stack and protocol reports the same stages: parse (read and check the body),
preprocess (tokenize, or a pipeline's preprocess code), the engine (the backend's or pipeline's `stage`:
`inference`, `triton`), postprocess (shape the answer, or a pipeline's postprocess code). Which names resolve to
which endpoint is `catalog`'s business; how a model's texts are admitted, batched and run is `predictor`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from observability.metrics import stage
from services.api.catalog import Catalog
from services.api.endpoint import PARSE, POSTPROCESS, EndpointSource, SingleModelEndpoint
from services.api.predictor import Prediction, Predictor
from services.common.backend import Answer, InferenceBackend, Read, ServeCall, ServedModel
from services.common.contract import WARMUP_TEXTS
from services.common.settings import ApiSettings

log = logging.getLogger(__name__)

Rendered = TypeVar("Rendered")
__all__ = ["Answer", "DataPlane", "Prediction"]

Parse = Callable[[], Awaitable[tuple[ServedModel, list[str], Any]]]
"""A protocol's parse step for `infer`: reads its body, returns (the model to run, its texts, the parsed request)."""
Render = Callable[[ServedModel, Prediction, Any], Rendered]
"""A protocol's render step for `infer`: (model, prediction, the parsed request) -> the protocol's response."""


class DataPlane:
    """One per worker, built when the app starts (`services.api.app`) and kept in the app's state."""

    def __init__(
        self,
        settings: ApiSettings,
        builtin: ServedModel | None,
        backend: InferenceBackend,
        sources: Sequence[EndpointSource] = (),
    ):
        self.settings = settings
        self.catalog = Catalog(SingleModelEndpoint(builtin) if builtin else None, sources)
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

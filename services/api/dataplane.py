"""The data plane: the protocol-agnostic core that every request running a model or an endpoint's code goes through.

Built from what a stack declares (`services.common.backend`): an optional built-in model, an inference backend and
an endpoint resolver. The protocol edges only translate, and call one of two entries:

- `serve` answers `/serve/{endpoint}[/{version}]`, whose JSON is this API's own (`payloads`). It resolves the
  endpoint and runs it by its declared kind, the version chosen by the endpoint's policy (the version asked for, or
  the traffic split with the canary key); it names that version on the request's log lines, counts and times the
  endpoint's requests, and records the statistics declared for it.
- `infer` runs a model for another protocol (OpenAI, Open Inference), which parses and renders its own bodies.

Every stage of `serving_stage_duration_seconds` is timed in this module and nowhere else, so every stack and
protocol reports the same stages: parse (read and check the body), preprocess (tokenize, or a pipeline's preprocess
code), the engine (the backend's or pipeline's `stage`: `inference`, `triton`), postprocess (shape the answer, or a
pipeline's postprocess code). Which names resolve to which endpoint is `catalog`'s business.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import numpy as np

from observability import metrics
from observability.logging import set_serving_model
from observability.metrics import stage
from observability.tracing import current_span_sampled, record_span
from services.api.body import parse_json, validate
from services.api.catalog import Catalog
from services.api.coalesce import Coalescer, encode_jobs
from services.api.payloads import dumps, dumps_any, model_payload, pipeline_body
from services.common.backend import EndpointKind, EndpointResolver, InferenceBackend, PipelineEndpoint, ServedModel
from services.common.contract import WARMUP_TEXTS
from services.common.errors import PayloadTooLarge
from services.common.schemas import ServeRequest
from services.common.settings import ApiSettings
from services.monitoring import statistics
from services.monitoring.builtin import record_prediction
from services.monitoring.drift import DriftMonitor

log = logging.getLogger(__name__)

PARSE, PREPROCESS, POSTPROCESS = "parse", "preprocess", "postprocess"
PIPELINE = EndpointKind.PIPELINE
# Tokenizing more texts than this at once takes long enough (>~300 us) to move off the event loop.
INLINE_TOKENIZE_TEXTS = 4
Rendered = TypeVar("Rendered")


@dataclass(frozen=True)
class Prediction:
    """A model's answer to a request's texts: row i of each field is text i's."""

    outputs: np.ndarray
    token_counts: list[int]
    truncated: list[bool]


class Answer(NamedTuple):
    """What `serve` answers: the JSON body, and the model name and version the response headers carry."""

    body: bytes
    model: str
    version: str


Read = Callable[[], Awaitable[bytes]]
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
        endpoints: EndpointResolver | None = None,
        monitor: DriftMonitor | None = None,
    ):
        self.settings = settings
        self.catalog = Catalog(builtin, endpoints)
        self.backend = backend
        """The built-in model's backend; what readiness asks."""
        self.monitor = monitor
        self.ready = False
        self._coalescers: dict[int, Coalescer] = {}

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
        target = self.catalog.resolve(endpoint)
        if target.kind is PIPELINE:
            return await self._serve_pipeline(endpoint, target, version, read, content_type)
        model = target.choose(version, routing_key)  # the endpoint's policy: the version asked for, or its split
        set_serving_model(endpoint, model.version, model.run_id)  # the request's own context: gone when it ends
        with metrics.endpoint_request(endpoint, model.version):
            with stage(PARSE):
                body = validate(ServeRequest, parse_json(await read()))
            prediction = await self.predict(model, body.batch, body.truncate)
            with stage(POSTPROCESS):
                payload = model_payload(model, prediction, body.text is not None)
                declared = self.catalog.endpoints.declared(endpoint)
                if declared is not None:  # the request's fields are copied out only when variables may read them
                    statistics.record(endpoint, model.version, declared, None, payload, body.model_dump(), self.monitor)
                return Answer(dumps(payload), model.manifest.name, model.version)

    async def _serve_pipeline(
        self, endpoint: str, pipeline: PipelineEndpoint, version: str | None, read: Read, content_type: str | None
    ) -> Answer:
        """clearml-serving's order: a fresh `state` per request; what its code collects feeds the statistics."""
        with stage(PARSE):
            body = pipeline_body(await read(), content_type)
        with metrics.endpoint_request(endpoint, pipeline.version):
            pipeline.accept(version)
            state: dict = {}
            collected: dict = {}

            def collect(values: dict | None) -> None:
                collected.update(values or {})

            with stage(PREPROCESS):
                data = await pipeline.preprocess(body, state, collect)
            with stage(pipeline.stage):
                data = await pipeline.process(data, state, collect)
            with stage(POSTPROCESS):
                data = await pipeline.postprocess(data, state, collect)
            declared = self.catalog.endpoints.declared(endpoint)
            statistics.record(endpoint, pipeline.version, declared, collected, data, body, self.monitor)
            return Answer(dumps_any(data, endpoint), endpoint, pipeline.version)

    async def infer(self, parse: Parse, render: Render[Rendered]) -> Rendered:
        """A model run for a protocol of its own: its parse step, the prediction, its render step."""
        with stage(PARSE):
            model, texts, request = await parse()
        prediction = await self.predict(model, texts)
        with stage(POSTPROCESS):
            return render(model, prediction, request)

    async def predict(self, model: ServedModel, texts: list[str], truncate: bool | None = None) -> Prediction:
        """`texts` through `model`: tokenized (preprocess) and run (the backend's stage), coalesced with the
        worker's concurrent predictions of the same model when the setting is on."""
        if len(texts) > self.settings.max_texts:
            raise PayloadTooLarge(
                f"{len(texts)} texts in one request; the limit is {self.settings.max_texts}: split the request"
            )
        truncate = self.settings.truncate if truncate is None else truncate
        metrics.child(metrics.TEXTS_PER_REQUEST, model.endpoint, model.version).observe(len(texts))
        if self.settings.coalesce:
            return await self._coalesced(model, texts, truncate)
        with stage(PREPROCESS):
            if len(texts) <= INLINE_TOKENIZE_TEXTS:
                encoded = model.tokenizer.encode(texts, truncate=truncate)
            else:
                encoded = await asyncio.to_thread(model.tokenizer.encode, texts, truncate=truncate)
        outputs = await self._run(model, encoded)
        return Prediction(outputs, encoded.token_counts, encoded.truncated)

    async def _run(self, model: ServedModel, encoded) -> np.ndarray:
        """The backend on tokenized texts; then tokens, truncations and the built-in statistics of the rows (for a
        coalesced batch: all its rows at once, the same values per-request recording would give, at a tenth of the
        metric calls)."""
        with stage(model.backend.stage):
            outputs = await model.backend.infer(encoded)
        metrics.TOKENS.inc(sum(encoded.token_counts))
        if any(encoded.truncated):
            metrics.TRUNCATED.inc(sum(encoded.truncated))
        record_prediction(model, outputs, encoded.token_counts, encoded.truncated, self.monitor)
        return outputs

    def _coalescer(self, model: ServedModel) -> Coalescer:
        """The model version's coalescer, made at its first request and dropped with the version (a retired
        registry version is freed, tokenizer included: the coalescer holds the model only weakly)."""
        key = id(model)
        found = self._coalescers.get(key)
        if found is None:
            alive, tokenizer = weakref.ref(model), model.tokenizer

            def encode(jobs):
                with stage(PREPROCESS):
                    return encode_jobs(tokenizer, jobs)

            async def infer(encoded):
                outputs = await self._run(alive(), encoded)  # alive: the callers riding this batch hold it
                metrics.COALESCED_TEXTS.observe(len(encoded.token_counts))
                return outputs

            settings = self.settings
            found = self._coalescers[key] = Coalescer(
                encode, infer, settings.coalesce_max_texts, settings.coalesce_depth, prefer=current_span_sampled
            )
            weakref.finalize(model, self._coalescers.pop, key, None)
        return found

    async def _coalesced(self, model: ServedModel, texts: list[str], truncate: bool) -> Prediction:
        """Joined with the worker's concurrent predictions of the same model (`services.api.coalesce`)."""
        batched, job = await self._coalescer(model).submit(texts, truncate)
        done = time.time_ns()
        record_span("coalesce wait", job.submitted_ns, job.started_ns)
        if not job.carrier:  # the carrier's trace has the batch's own spans
            record_span("batch", job.started_ns, done, {"batch.texts": batched.batch_texts})
        return Prediction(batched.outputs, batched.token_counts, batched.truncated)

"""Protocol-agnostic core of the serving API: endpoint lookup, tokenization and inference.

Built from what a stack declares (`services.common.backend`): an optional built-in model, an inference backend and
an endpoint resolver. The protocol edges (`routes`, `v2`) parse requests, call this, and shape the responses
themselves; per-stage latency is recorded here so every stack reports the same stages.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from dataclasses import dataclass

import numpy as np

from observability import metrics
from observability.metrics import stage
from observability.tracing import current_span_sampled, record_span
from services.api.coalesce import Coalescer
from services.common.backend import (
    EndpointResolver,
    InferenceBackend,
    ModelEndpoint,
    NoConfiguredEndpoints,
    PipelineEndpoint,
    ServedModel,
    SingleModelEndpoint,
)
from services.common.errors import NotFound, PayloadTooLarge
from services.common.settings import ApiSettings
from services.monitoring.builtin import record_prediction
from services.monitoring.drift import DriftMonitor

log = logging.getLogger(__name__)

WARMUP_TEXTS = ["warm up", "the quick brown fox jumps over the lazy dog"]
# Tokenizing more texts than this at once takes long enough (>~300 us) to move off the event loop.
INLINE_TOKENIZE_TEXTS = 4


@dataclass(frozen=True)
class Prediction:
    outputs: np.ndarray
    token_counts: list[int]
    truncated: list[bool]


class DataPlane:
    def __init__(
        self,
        settings: ApiSettings,
        builtin: ServedModel | None,
        backend: InferenceBackend,
        endpoints: EndpointResolver | None = None,
        monitor: DriftMonitor | None = None,
    ):
        self.settings = settings
        self.builtin = SingleModelEndpoint(builtin) if builtin else None
        self.backend = backend
        self.endpoints = endpoints or NoConfiguredEndpoints()
        self.monitor = monitor
        self.ready = False
        self._coalescers: dict[int, Coalescer] = {}

    def endpoint_names(self) -> list[str]:
        return ([self.builtin.name] if self.builtin else []) + self.endpoints.names()

    def _not_found(self, what: str) -> NotFound:
        names = self.endpoint_names()
        serves = ", ".join(f"'{n}'" for n in names) if names else "no endpoint yet"
        return NotFound(f"{what}; this server serves {serves}")

    def resolve(self, endpoint: str) -> ModelEndpoint | PipelineEndpoint:
        """The endpoint of that name (the built-in one first), or NotFound listing what is served."""
        if self.builtin and endpoint == self.builtin.name:
            return self.builtin
        found = self.endpoints.resolve(endpoint)
        if found is None:
            raise self._not_found(f"no endpoint '{endpoint}'")
        return found

    def model_for(self, endpoint: str, version: str | None = None, routing_key: str | None = None) -> ServedModel:
        """The model version that answers `endpoint` (and `version`, if given) now."""
        found = self.resolve(endpoint)
        if not hasattr(found, "choose"):
            raise NotFound(f"endpoint '{endpoint}' runs preprocess code; call it at /serve/{endpoint}")
        return found.choose(version, routing_key)

    def model_named(self, name: str | None) -> ServedModel:
        """For APIs that name a model (OpenAI `model`): an endpoint name, the built-in model's name, or nothing."""
        if self.builtin and name in (None, "", self.builtin.model.manifest.name):
            return self.builtin.model
        if name in (None, ""):
            raise self._not_found("no default model")
        try:
            return self.model_for(name)
        except NotFound:
            raise self._not_found(f"no model '{name}'") from None

    async def warm_up(self) -> bool:
        """Run a few predictions on the built-in model so the first user request is not slow; readiness waits."""
        if self.builtin:
            try:
                for _ in range(3):
                    await self.predict(self.builtin.model, WARMUP_TEXTS)
            except Exception as exc:  # noqa: BLE001 - stay not ready; /health/ready retries
                log.warning("warm-up failed, not ready yet: %s", exc)
                return False
        self.ready = True
        return True

    async def is_ready(self) -> bool:
        """Warmed up (retrying the warm-up if it failed, e.g. Triton came up late) and the backend answers."""
        return (self.ready or await self.warm_up()) and await self.backend.ready()

    def _coalescer(self, model: ServedModel) -> Coalescer:
        """The model version's coalescer, made at its first request and dropped with the version (a retired
        registry version is freed, tokenizer included: the coalescer holds the model only weakly)."""
        key = id(model)
        found = self._coalescers.get(key)
        if found is None:
            alive = weakref.ref(model)

            async def infer(encoded):
                served = alive()  # alive: the callers riding this batch hold it
                with stage(served.backend.stage):
                    outputs = await served.backend.infer(encoded)
                self._record(served, outputs, encoded.token_counts, encoded.truncated)  # once a batch, every row
                metrics.COALESCED_TEXTS.observe(len(encoded.token_counts))
                return outputs

            found = self._coalescers[key] = Coalescer(
                model.tokenizer,
                infer,
                self.settings.coalesce_max_texts,
                self.settings.coalesce_depth,
                prefer=current_span_sampled,
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

    async def predict(self, model: ServedModel, texts: list[str], truncate: bool | None = None) -> Prediction:
        if len(texts) > self.settings.max_texts:
            raise PayloadTooLarge(
                f"{len(texts)} texts in one request; the limit is {self.settings.max_texts}: split the request"
            )
        truncate = self.settings.truncate if truncate is None else truncate
        metrics.child(metrics.TEXTS_PER_REQUEST, model.endpoint, model.version).observe(len(texts))
        if self.settings.coalesce:
            return await self._coalesced(model, texts, truncate)
        with stage("preprocess"):
            if len(texts) <= INLINE_TOKENIZE_TEXTS:
                encoded = model.tokenizer.encode(texts, truncate=truncate)
            else:
                encoded = await asyncio.to_thread(model.tokenizer.encode, texts, truncate=truncate)
        with stage(model.backend.stage):
            outputs = await model.backend.infer(encoded)
        self._record(model, outputs, encoded.token_counts, encoded.truncated)
        return Prediction(outputs, encoded.token_counts, encoded.truncated)

    def _record(self, model: ServedModel, outputs, token_counts: list[int], truncated: list[bool]) -> None:
        """Tokens, truncations and the built-in statistics of predicted rows (for a coalesced batch: all its rows
        at once, the same values per-request recording would give, at a tenth of the metric calls)."""
        metrics.TOKENS.inc(sum(token_counts))
        if any(truncated):
            metrics.TRUNCATED.inc(sum(truncated))
        record_prediction(model, outputs, token_counts, truncated, self.monitor)

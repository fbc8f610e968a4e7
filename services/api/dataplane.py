"""Protocol-agnostic core of the serving API: endpoint lookup, admission, tokenization and inference.

Built from what a stack declares (`services.common.backend`): an inference backend and an endpoint resolver.
The protocol edges (`routes`, `v2`) parse requests, call this, and shape the responses themselves; per-stage
latency is recorded here so every stack reports the same stages.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from observability import metrics
from observability.metrics import stage
from services.common.backend import Endpoint, EndpointResolver, InferenceBackend, NoConfiguredEndpoints
from services.common.contract import Manifest
from services.common.errors import NotFound, Overloaded, PayloadTooLarge
from services.common.settings import ApiSettings
from services.common.tokenization import TextTokenizer

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
        manifest: Manifest,
        tokenizer: TextTokenizer,
        backend: InferenceBackend,
        endpoints: EndpointResolver | None = None,
    ):
        self.settings = settings
        self.manifest = manifest
        self.tokenizer = tokenizer
        self.backend = backend
        self.endpoints = endpoints or NoConfiguredEndpoints()
        self.inflight = 0
        self.ready = False

    def configured_endpoint(self, name: str) -> Endpoint | None:
        """The configured endpoint of that name (gateway), or None for the built-in endpoint's checks."""
        return self.endpoints.resolve(name)

    def check_endpoint(self, endpoint: str, version: str | None = None) -> None:
        if endpoint != self.settings.endpoint:
            raise NotFound(f"no endpoint '{endpoint}'; this server serves '{self.settings.endpoint}'")
        if version is not None and version != self.manifest.version:
            raise NotFound(f"endpoint '{endpoint}' has no version '{version}'; available: '{self.manifest.version}'")

    def check_model_name(self, name: str | None) -> None:
        if name not in (None, "", self.manifest.name, self.settings.endpoint):
            raise NotFound(f"no model '{name}'; this server serves '{self.manifest.name}'")

    @contextmanager
    def admit(self) -> Iterator[None]:
        """Bound the requests this worker holds at once: shed load with 429 instead of queueing forever."""
        if self.inflight >= self.settings.max_inflight:
            raise Overloaded(
                f"this worker is handling {self.inflight} requests, its limit; retry shortly", retry_after=1
            )
        self.inflight += 1
        metrics.INFLIGHT.inc()
        try:
            yield
        finally:
            self.inflight -= 1
            metrics.INFLIGHT.dec()

    async def warm_up(self) -> bool:
        """Run a few predictions so the first user request is not slow; readiness waits for this."""
        try:
            for _ in range(3):
                await self.predict(WARMUP_TEXTS)
        except Exception as exc:  # noqa: BLE001 - stay not ready; /health/ready retries
            log.warning("warm-up failed, not ready yet: %s", exc)
            return False
        self.ready = True
        return True

    async def is_ready(self) -> bool:
        """Warmed up (retrying the warm-up if it failed, e.g. Triton came up late) and the backend answers."""
        return (self.ready or await self.warm_up()) and await self.backend.ready()

    async def predict(self, texts: list[str], truncate: bool | None = None) -> Prediction:
        if len(texts) > self.settings.max_texts:
            raise PayloadTooLarge(
                f"{len(texts)} texts in one request; the limit is {self.settings.max_texts}: split the request"
            )
        truncate = self.settings.truncate if truncate is None else truncate
        with stage("preprocess"):
            if len(texts) <= INLINE_TOKENIZE_TEXTS:
                encoded = self.tokenizer.encode(texts, truncate=truncate)
            else:
                encoded = await asyncio.to_thread(self.tokenizer.encode, texts, truncate=truncate)
        with stage(self.backend.stage):
            outputs = await self.backend.infer(encoded)
        metrics.TOKENS.inc(sum(encoded.token_counts))
        if any(encoded.truncated):
            metrics.TRUNCATED.inc(sum(encoded.truncated))
        return Prediction(outputs, encoded.token_counts, encoded.truncated)

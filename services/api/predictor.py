"""Texts through a model, for the data plane: tokenized (the `preprocess` stage) and run by the model's backend (its
own stage), inside the worker's token budget, coalesced with the worker's concurrent predictions of the same model
when the setting is on, and run in calls of at most `max_batch_tokens` padded tokens.

Each worker admits work by tokens (`services.api.budget`); a request of
over half of `max_batch_tokens` (estimated) skips coalescing: it fills a batch by itself, and the small requests
behind it would wait for its batch; it runs in calls of at most `max_batch_tokens`, one after the other, so the
others' calls come in between and a batch's memory stays bounded (ONNX Runtime keeps its arena at the largest batch
it ran). Tokenizing moves off the event loop once it is big enough to stall it, to threads of the worker's own.
Why these bounds: docs/decisions/request-bounds.md.
"""

from __future__ import annotations

import asyncio
import os
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import numpy as np

from observability import metrics
from observability.metrics import stage
from observability.tally import TALLY
from observability.tracing import current_span_sampled, record_span
from services.api.budget import TokenBudget, estimate
from services.api.coalesce import Coalescer, Job, encode_jobs, fail_jobs, tokenize_jobs
from services.common.backend import ServedModel
from services.common.errors import PayloadTooLarge
from services.common.memory import trimmer
from services.common.settings import ApiSettings
from services.common.tokenization import EncodedBatch, TextTokenizer
from services.monitoring.builtin import record_prediction

PREPROCESS = "preprocess"
INLINE_TOKENIZE_TEXTS = 4
"""Tokenizing more texts than this at once takes long enough (>~300 us) to move off the event loop."""
INLINE_TOKENIZE_CHARS = 16_384
"""Nor more characters than this (~64 short sentences, a coalesced batch's usual share; ~1-2 ms)."""


@dataclass(frozen=True)
class Prediction:
    """A model's answer to a request's texts: row i of each field is text i's."""

    outputs: np.ndarray
    token_counts: list[int]
    truncated: list[bool]
    device: str
    """Where the model ran (the backend's `device`): the `x-device` header of the answer."""


def inline(texts: int, chars: int) -> bool:
    """Whether tokenizing this much is cheap enough for the event loop."""
    return texts <= INLINE_TOKENIZE_TEXTS and chars <= INLINE_TOKENIZE_CHARS


class Predictor:
    """One per worker (inside the data plane): the token budget and the coalescers of the models it serves."""

    def __init__(self, settings: ApiSettings):
        self.settings = settings
        self.budget = TokenBudget(settings.max_concurrent_tokens, settings.token_wait)
        threads = max(1, (os.cpu_count() or 1) // settings.workers)
        self.tokenizing = ThreadPoolExecutor(threads, thread_name_prefix="tokenizer")
        """Threads for big tokenizations: as many as the worker's share of the cores (more only take CPU from the
        event loop); one queued when its caller leaves never starts."""
        self._coalescers: dict[int, Coalescer] = {}

    async def tokenize(self, tokenizer: TextTokenizer, texts: list[str], truncate: bool, chars: int) -> EncodedBatch:
        if inline(len(texts), chars):
            return tokenizer.encode(texts, truncate=truncate)
        run = partial(tokenizer.encode, texts, truncate=truncate)
        return await asyncio.get_running_loop().run_in_executor(self.tokenizing, run)

    async def predict(self, model: ServedModel, texts: list[str], truncate: bool | None = None) -> Prediction:
        """`texts` through `model` once the budget holds their tokens: coalesced if small, else on their own."""
        settings = self.settings
        if len(texts) > settings.max_texts:
            raise PayloadTooLarge(
                f"{len(texts)} texts in one request; the limit is {settings.max_texts}: split the request"
            )
        truncate = settings.truncate if truncate is None else truncate
        TALLY.observe(metrics.child(metrics.TEXTS_PER_REQUEST, model.endpoint, model.version), len(texts))
        tokens = estimate(texts, model.tokenizer.max_length)
        chars = sum(map(len, texts))
        lease = self.budget.take(tokens) or await self.budget.queue(tokens)
        try:
            if settings.coalesce and 2 * tokens <= settings.max_batch_tokens:
                return await self._coalesced(model, texts, truncate, tokens, chars)
            with stage(PREPROCESS):
                encoded = await self.tokenize(model.tokenizer, texts, truncate, chars)
            rows, width = encoded.shape
            lease.settle(rows * width)
            outputs = await self._run(model, encoded)
            return Prediction(outputs, encoded.token_counts, encoded.truncated, model.backend.device)
        finally:
            lease.release()
            if chars > INLINE_TOKENIZE_CHARS:
                trimmer.big_work_done()  # its body and tokens are freed: return them once such requests stop

    async def _run(self, model: ServedModel, encoded: EncodedBatch) -> np.ndarray:
        """The backend on tokenized texts, in calls of at most `max_batch_tokens` padded tokens; then tokens,
        truncations and the built-in statistics of the rows (for a coalesced batch: all its rows at once, the same
        values per-request recording would give, at a tenth of the metric calls)."""
        rows, width = encoded.shape
        step = max(1, self.settings.max_batch_tokens // max(1, width))
        with stage(model.backend.stage):
            if rows <= step:
                outputs = await model.backend.infer(encoded)
            else:
                parts = [await model.backend.infer(encoded.rows(i, i + step)) for i in range(0, rows, step)]
                outputs = np.concatenate(parts)
        TALLY.inc(metrics.TOKENS, sum(encoded.token_counts))
        if any(encoded.truncated):
            TALLY.inc(metrics.TRUNCATED, sum(encoded.truncated))
        record_prediction(model, outputs, encoded.token_counts, encoded.truncated)
        return outputs

    def _coalescer(self, model: ServedModel) -> Coalescer:
        """The model version's coalescer, made at its first request and dropped with the version (a retired
        registry version is freed, tokenizer included: the coalescer holds the model only weakly)."""
        key = id(model)
        found = self._coalescers.get(key)
        if found is None:
            alive, tokenizer = weakref.ref(model), model.tokenizer

            async def encode(jobs: list[Job]) -> tuple[EncodedBatch | None, list[Job]]:
                with stage(PREPROCESS):
                    if inline(0, sum(job.chars for job in jobs)):
                        return encode_jobs(tokenizer, jobs)
                    encoded, good, failed = await asyncio.get_running_loop().run_in_executor(
                        self.tokenizing, tokenize_jobs, tokenizer, jobs
                    )
                    fail_jobs(failed)  # back on the loop: futures are not thread-safe
                    return encoded, good

            async def infer(encoded: EncodedBatch) -> np.ndarray:
                held = alive()  # alive: the callers riding this batch hold it
                if held is None:
                    raise RuntimeError("a batch ran for a model version no caller holds")
                outputs = await self._run(held, encoded)
                TALLY.observe(metrics.COALESCED_TEXTS, len(encoded.token_counts))
                return outputs

            settings = self.settings
            found = self._coalescers[key] = Coalescer(
                encode,
                infer,
                settings.coalesce_max_texts,
                settings.coalesce_depth,
                prefer=current_span_sampled,
                # estimated: twice a backend call's tokens, so 64 one-sentence requests (~62 estimated each, ~16 real)
                # still ride one batch; the batch then runs in calls of `max_batch_tokens` real tokens
                max_tokens=2 * settings.max_batch_tokens,
            )
            weakref.finalize(model, self._coalescers.pop, key, None)
        return found

    async def _coalesced(
        self, model: ServedModel, texts: list[str], truncate: bool, tokens: int, chars: int
    ) -> Prediction:
        """Joined with the worker's concurrent predictions of the same model (`services.api.coalesce`)."""
        batched, job = await self._coalescer(model).submit(texts, truncate, tokens, chars)
        done = time.time_ns()
        record_span("coalesce wait", job.submitted_ns, job.started_ns)
        if not job.carrier:  # the carrier's trace has the batch's own spans
            record_span("batch", job.started_ns, done, {"batch.texts": batched.batch_texts})
        return Prediction(batched.outputs, batched.token_counts, batched.truncated, model.backend.device)

"""Request coalescing: the concurrent predictions of one model in one worker become one tokenizer call and one
backend call (for the gateway: one Triton request), then are split back, each caller getting exactly its own rows.

No timer: a prediction starts at once while fewer than `depth` batches are in flight, so a lone request pays
nothing; under load, requests arriving while the batches are busy wait for the next one and join it. The batching
delay therefore adapts to the load by itself: zero when idle, one batch's service time when saturated.

Errors stay with their request: if the joined tokenization fails (one text too long with truncation off), each
request is tokenized on its own and only the failing ones get the error; a backend error fails the batch it hit.

A request whose caller has gone (its client disconnected, its deadline passed: `services.api.lifetime`) leaves a
cancelled future: if its batch has not started, its texts are not sent; if every request of a started batch has
gone, the batch is cancelled (its Triton call with it). A batch is bounded by texts (`max_texts`) and by the
requests' estimated tokens (`max_tokens`), so one batch cannot hold the backend for long; the batch's Triton call
gets the latest deadline of its requests (it is useful while any of them still waits).

The coalescer only groups and splits: what tokenizing and inference are, and the timing of their stages, come from
the data plane (`encode`, `infer`).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from services.common.deadline import deadline_var
from services.common.errors import ServingError
from services.common.tokenization import EncodedBatch, TextTokenizer


@dataclass
class Job:
    texts: list[str]
    truncate: bool
    future: asyncio.Future
    tokens: int = 0
    """Its estimated tokens (`services.api.budget.estimate`), counted against the batch's `max_tokens`."""
    chars: int = 0
    """Characters of its texts: what tokenizing it costs."""
    deadline: float | None = field(default_factory=deadline_var.get)
    batch: list[Job] | None = None
    """The jobs of the batch it rode in, once started."""
    context: contextvars.Context = field(default_factory=contextvars.copy_context)
    """The caller's context (its trace span): the batch runs in its carrier's, so one trace shows the inside."""
    submitted_ns: int = field(default_factory=time.time_ns)
    started_ns: int = 0
    """When its batch started (the wait before is the coalescing cost, recorded by the caller)."""
    carrier: bool = False
    """The batch ran in this job's context: its trace has the batch's own stage spans."""


@dataclass
class Batched:
    outputs: np.ndarray
    token_counts: list[int]
    truncated: list[bool]
    batch_texts: int
    """Texts in the batch this request rode in (its own included)."""


Encode = Callable[[list[Job]], Awaitable[tuple[EncodedBatch | None, list[Job]]]]
"""A batch's jobs tokenized: `encode_jobs` over the model's tokenizer (on a thread for a big batch)."""
Infer = Callable[[EncodedBatch], Awaitable[np.ndarray]]


def encode_jobs(tokenizer: TextTokenizer, jobs: list[Job]) -> tuple[EncodedBatch | None, list[Job]]:
    """The jobs' texts tokenized in one call; on a ServingError, each job alone to find the failing ones, whose
    futures get their error. Returns (encoding of the good jobs or None if there are none, the good jobs).

    Runs on the event loop's thread, where futures may be completed; a thread runs `tokenize_jobs` instead."""
    encoded, good, failed = tokenize_jobs(tokenizer, jobs)
    fail_jobs(failed)
    return encoded, good


def tokenize_jobs(
    tokenizer: TextTokenizer, jobs: list[Job]
) -> tuple[EncodedBatch | None, list[Job], list[tuple[Job, ServingError]]]:
    """`encode_jobs` without touching a future, so that it may run on a thread: the failing jobs are returned with
    their errors instead."""
    try:
        return tokenizer.encode([t for job in jobs for t in job.texts], truncate=jobs[0].truncate), jobs, []
    except ServingError:
        good, failed = [], []
        for job in jobs:
            try:
                tokenizer.encode(job.texts, truncate=job.truncate)
                good.append(job)
            except ServingError as exc:
                failed.append((job, exc))
        if not good:
            return None, [], failed
        return tokenizer.encode([t for job in good for t in job.texts], truncate=good[0].truncate), good, failed


def fail_jobs(failed: list[tuple[Job, ServingError]]) -> None:
    """Each failing job's caller gets its error (one that has gone already is skipped). On the event loop only:
    asyncio futures are not thread-safe."""
    for job, exc in failed:
        if not job.future.done():
            job.future.set_exception(exc)


class Coalescer:
    def __init__(
        self,
        encode: Encode,
        infer: Infer,
        max_texts: int,
        depth: int = 2,
        prefer: Callable[[], bool] = lambda: False,
        max_tokens: int | None = None,
    ):
        self.prefer = prefer
        """Run inside a job's context, says whether that job should carry the batch (its trace is sampled)."""
        self.encode = encode
        self.infer = infer
        self.max_texts = max_texts
        self.max_tokens = max_tokens
        self.depth = depth
        self.pending: list[Job] = []
        self.inflight = 0
        self._batches: dict[int, asyncio.Task] = {}
        """The running batch of each started job's batch list (by id), to cancel one nobody waits for any more."""

    async def submit(self, texts: list[str], truncate: bool, tokens: int = 0, chars: int = 0) -> tuple[Batched, Job]:
        job = Job(texts, truncate, asyncio.get_running_loop().create_future(), tokens, chars)
        self.pending.append(job)
        if self.inflight < self.depth:
            self._launch()
        try:
            return await job.future, job
        except asyncio.CancelledError:
            self._abandon(job)
            raise

    def _abandon(self, job: Job) -> None:
        """Its caller has gone: a started batch whose every caller has gone is cancelled; a pending job is skipped
        when the next batch is taken."""
        if job.batch is not None and all(other.future.cancelled() for other in job.batch):
            task = self._batches.get(id(job.batch))
            if task is not None:
                task.cancel()

    def _take(self) -> list[Job]:
        """The next batch: pending jobs in arrival order, same truncation flag, up to max_texts texts and max_tokens
        estimated tokens (a job alone may be bigger); jobs whose callers have gone are dropped."""
        self.pending = [job for job in self.pending if not job.future.done()]
        if not self.pending:
            return []
        first = self.pending[0]
        max_tokens = self.max_tokens or float("inf")
        batch: list[Job] = []
        rest: list[Job] = []
        count, tokens = 0, 0
        for job in self.pending:
            fits = not batch or (count + len(job.texts) <= self.max_texts and tokens + job.tokens <= max_tokens)
            if job.truncate == first.truncate and fits:
                batch.append(job)
                count += len(job.texts)
                tokens += job.tokens
            else:
                rest.append(job)
        self.pending = rest
        return batch

    def _launch(self) -> None:
        jobs = self._take()
        if not jobs:
            return
        carrier = next((job for job in jobs if job.context.run(self.prefer)), jobs[0])
        carrier.carrier = True
        self.inflight += 1
        for job in jobs:
            job.batch = jobs
        task = asyncio.get_running_loop().create_task(self._run(jobs), context=carrier.context)
        self._batches[id(jobs)] = task
        task.add_done_callback(lambda done: self._done(jobs))

    def _done(self, jobs: list[Job]) -> None:
        self.inflight -= 1
        del self._batches[id(jobs)]
        while self.pending and self.inflight < self.depth:
            self._launch()

    async def _run(self, jobs: list[Job]) -> None:
        now = time.time_ns()
        for job in jobs:
            job.started_ns = now
        deadlines = [job.deadline for job in jobs if job.deadline is not None]
        deadline_var.set(
            max(deadlines) if len(deadlines) == len(jobs) else None
        )  # in the batch's own copy of the context
        try:
            encoded, good = await self.encode(jobs)
            if encoded is None:
                return
            outputs = await self.infer(encoded)
            row = 0
            total = sum(len(job.texts) for job in good)
            for job in good:
                rows = slice(row, row + len(job.texts))
                row += len(job.texts)
                if not job.future.done():  # a caller that went away (disconnect) leaves a cancelled future
                    job.future.set_result(
                        Batched(outputs[rows], encoded.token_counts[rows], encoded.truncated[rows], total)
                    )
        except BaseException as exc:  # noqa: BLE001 - every waiting caller gets the batch's failure
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            if not isinstance(exc, Exception):
                raise

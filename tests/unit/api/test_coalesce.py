"""Coalescing never mixes up which rows belong to which request: under concurrency, with a failing text in the
middle of a batch, and with a backend failure; a lone request goes at once and alone."""

import asyncio

import numpy as np
import pytest

from services.api.coalesce import Coalescer, encode_jobs
from services.common.contract import TOKENIZER_FILE, Manifest
from services.common.deadline import deadline_var
from services.common.errors import InvalidInput, Unavailable
from services.common.tokenization import EncodedBatch, TextTokenizer
from tests.support.models import unit_model_dir


@pytest.fixture
def tokenizer(tmp_path):
    model_dir = unit_model_dir(tmp_path / "m")
    return TextTokenizer(model_dir / TOKENIZER_FILE, Manifest.load(model_dir).max_seq_length)


class Backend:
    """Each row answers with the sum of its input ids (a fingerprint of its text); slow enough for others to queue."""

    def __init__(self, fail_on: int | None = None):
        self.batches: list[int] = []
        self.fail_on = fail_on

    async def infer(self, batch: EncodedBatch) -> np.ndarray:
        self.batches.append(batch.shape[0])
        await asyncio.sleep(0.01)
        if self.fail_on is not None and len(self.batches) == self.fail_on:
            raise Unavailable("Triton is down")
        return (batch.input_ids * batch.attention_mask).sum(axis=1, keepdims=True).astype(np.float32)


def encoder(tokenizer):
    async def encode(jobs):
        return encode_jobs(tokenizer, jobs)

    return encode


def fingerprint(tokenizer, texts):
    encoded = tokenizer.encode(texts)
    return (encoded.input_ids * encoded.attention_mask).sum(axis=1)


def words(i: int) -> list[str]:
    return [f"request {i} " + "word " * (i % 7), f"second text of {i}"] if i % 3 == 0 else [f"only {i} " * (i % 5 + 1)]


def test_concurrent_requests_share_batches_and_each_gets_its_own_rows(tokenizer):
    backend = Backend()
    coalescer = Coalescer(encoder(tokenizer), backend.infer, max_texts=64, depth=1)

    async def scenario():
        return await asyncio.gather(*(coalescer.submit(words(i), True) for i in range(60)))

    answers = asyncio.run(scenario())
    for i, (batched, _) in enumerate(answers):
        assert batched.outputs[:, 0].tolist() == fingerprint(tokenizer, words(i)).tolist(), i
        assert batched.token_counts == tokenizer.encode(words(i)).token_counts
    assert len(backend.batches) < 10, f"60 concurrent requests should ride few batches: {backend.batches}"
    assert max(backend.batches) <= 64, "a batch never exceeds max_texts"


def test_a_failing_text_in_the_middle_fails_only_its_request(tokenizer):
    backend = Backend()
    coalescer = Coalescer(encoder(tokenizer), backend.infer, max_texts=64, depth=1)
    too_long = "word " * 2000

    async def scenario():
        blocker = asyncio.ensure_future(coalescer.submit(["first goes alone"], False))
        await asyncio.sleep(0)  # the rest queue behind it and ride one batch together
        rest = [coalescer.submit(texts, False) for texts in (["a"], ["fine", too_long], ["b c d"])]
        return await asyncio.gather(blocker, *rest, return_exceptions=True)

    first, a, bad, bcd = asyncio.run(scenario())
    assert isinstance(bad, InvalidInput)
    assert a[0].outputs[:, 0].tolist() == fingerprint(tokenizer, ["a"]).tolist()
    assert bcd[0].outputs[:, 0].tolist() == fingerprint(tokenizer, ["b c d"]).tolist()
    assert a[0].batch_texts == 2, "the good requests of the batch still went together"


def test_a_backend_failure_fails_its_batch_and_the_next_batch_works(tokenizer):
    backend = Backend(fail_on=1)
    coalescer = Coalescer(encoder(tokenizer), backend.infer, max_texts=64, depth=1)

    async def scenario():
        first = await asyncio.gather(coalescer.submit(["x"], True), return_exceptions=True)
        second = await coalescer.submit(["y"], True)
        return first[0], second

    failed, (ok, _) = asyncio.run(scenario())
    assert isinstance(failed, Unavailable)
    assert ok.outputs[:, 0].tolist() == fingerprint(tokenizer, ["y"]).tolist()
    assert coalescer.inflight == 0 and coalescer.pending == []


YIELDS = 5
"""Turns of the event loop a lone request may take to reach the backend (it takes 2: submit, the batch's task)."""


def test_a_lone_request_goes_at_once_and_alone(tokenizer):
    backend = Backend()
    coalescer = Coalescer(encoder(tokenizer), backend.infer, max_texts=64, depth=2)

    async def scenario():
        request = asyncio.ensure_future(coalescer.submit(["alone"], True))
        for _ in range(YIELDS):  # no clock: a timer of any length would still be pending after these
            await asyncio.sleep(0)
        return list(backend.batches), await request

    sent, (batched, job) = asyncio.run(scenario())
    assert sent == [1], "with nothing in flight the request reaches the backend at once, without a batching delay"
    assert batched.batch_texts == 1 and backend.batches == [1]
    assert job.carrier


class SlowBackend(Backend):
    """Holds each batch until released, and records the batches it ran or saw cancelled."""

    def __init__(self):
        super().__init__()
        self.go = asyncio.Event()
        self.cancelled = 0

    async def infer(self, batch: EncodedBatch) -> np.ndarray:
        self.batches.append(batch.shape[0])
        try:
            await self.go.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return np.zeros((batch.shape[0], 1), dtype=np.float32)


def test_a_request_whose_caller_left_before_its_batch_started_is_not_sent(tokenizer):
    backend = SlowBackend()
    coalescer = Coalescer(encoder(tokenizer), backend.infer, max_texts=64, depth=1)

    async def scenario():
        running = asyncio.ensure_future(coalescer.submit(["first"], True))
        await asyncio.sleep(0.01)  # its batch holds the backend
        gone = asyncio.ensure_future(coalescer.submit(["gone one", "gone two"], True))
        stays = asyncio.ensure_future(coalescer.submit(["stays"], True))
        await asyncio.sleep(0.01)
        gone.cancel()  # its client disconnected
        backend.go.set()
        await asyncio.gather(running, gone, stays, return_exceptions=True)
        return stays.result()[0]

    stays = asyncio.run(scenario())
    assert backend.batches == [1, 1], "the next batch holds only the request still waiting"
    assert stays.batch_texts == 1


def test_a_started_batch_whose_every_caller_left_is_cancelled(tokenizer):
    backend = SlowBackend()
    coalescer = Coalescer(encoder(tokenizer), backend.infer, max_texts=64, depth=1)

    async def scenario():
        blocker = asyncio.ensure_future(coalescer.submit(["first"], True))
        await asyncio.sleep(0.01)
        callers = [asyncio.ensure_future(coalescer.submit([f"text {i}"], True)) for i in range(3)]
        await asyncio.sleep(0.01)
        blocker.cancel()  # its batch had only its own caller: cancelled; the three ride the next one
        await asyncio.sleep(0.01)
        assert backend.batches == [1, 3] and backend.cancelled == 1
        callers[0].cancel()
        await asyncio.sleep(0.01)
        assert backend.cancelled == 1, "others still wait for the batch"
        for caller in callers[1:]:
            caller.cancel()
        await asyncio.sleep(0.01)
        return coalescer.inflight

    assert asyncio.run(scenario()) == 0
    assert backend.cancelled == 2, "the backend call was cancelled once nobody waited for it"


def test_batches_are_bounded_by_estimated_tokens_too(tokenizer):
    backend = Backend()
    coalescer = Coalescer(encoder(tokenizer), backend.infer, max_texts=64, depth=1, max_tokens=100)

    async def scenario():
        return await asyncio.gather(*(coalescer.submit([f"text {i}"], True, tokens=40) for i in range(7)))

    asyncio.run(scenario())
    assert backend.batches == [1, 2, 2, 2], "the first goes alone, then two of 40 tokens fit in 100"


def test_a_batch_calls_the_backend_with_the_latest_deadline_of_its_requests(tokenizer):
    seen = []

    async def infer(batch):
        seen.append(deadline_var.get())
        await asyncio.sleep(0.01)
        return np.zeros((batch.shape[0], 1), dtype=np.float32)

    coalescer = Coalescer(encoder(tokenizer), infer, max_texts=64, depth=1)

    async def submit(deadline):
        deadline_var.set(deadline)
        return await coalescer.submit(["x"], True)

    async def scenario():
        await asyncio.gather(submit(10.0), submit(30.0), submit(20.0))
        await asyncio.gather(submit(10.0), submit(None))

    asyncio.run(scenario())
    assert seen == [10.0, 30.0, 10.0, None], "alone; then the latest of two; alone; none if one has none"


def test_tokenizing_on_a_thread_leaves_the_futures_to_the_loop(tokenizer):
    """A big batch is tokenized on a thread: the failing job's error comes back to be set on the loop (asyncio
    futures are not thread-safe), and the good jobs are still encoded."""
    from services.api.coalesce import Job, fail_jobs, tokenize_jobs

    async def scenario():
        loop = asyncio.get_running_loop()
        good = Job(["hello"], False, loop.create_future())
        bad = Job([" ".join(["word"] * 500)], False, loop.create_future())  # over the maximum length, not truncated
        encoded, kept, failed = await asyncio.to_thread(tokenize_jobs, tokenizer, [good, bad])
        assert not good.future.done() and not bad.future.done(), "no future touched from the thread"
        assert kept == [good] and encoded.shape[0] == 1 and [job for job, _ in failed] == [bad]
        fail_jobs(failed)
        assert isinstance(bad.future.exception(), InvalidInput)

    asyncio.run(scenario())

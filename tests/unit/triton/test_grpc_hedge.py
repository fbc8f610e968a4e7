"""Hedging in the gateway's client (`least_work` over two replicas, fake stubs): a call its replica keeps unanswered
past twice its size's usual time gets a copy on the other replica and the caller takes the first answer; the first
call runs on with no caller waiting and its time marks its replica slower; a copy that loses runs on too (Triton
stalled a replica after cancelled calls); a caller gone cancels every call; a call answered in time is never
copied. Stubs are held by events, not by the clock; the usual time is set to 10 ms, so a copy goes out after 20 ms plus
`JITTER` (45 ms)."""

import asyncio

import grpc
import numpy as np
import pytest
from grpc.aio import AioRpcError, Metadata
from prometheus_client import REGISTRY

from services.common.errors import ServingError
from services.triton.grpc_client import TritonClient
from tests.unit.triton.test_grpc_retry import INTERNAL, STOPPING, answer

A, B = "127.0.0.2:8001", "127.0.0.3:8001"
INPUTS = {"input_ids": np.zeros((1, 4), np.int64)}


class Held:
    """Answers (or fails with `failure`) once `release` is set; counts its calls, started and cancelled."""

    def __init__(self, failure: tuple[grpc.StatusCode, str] | None = None, *, released: bool = False):
        self.release = asyncio.Event()
        if released:
            self.release.set()
        self.failure = failure
        self.calls = self.cancelled = self.answered = 0

    async def ModelInfer(self, request, timeout, metadata):  # noqa: N802 - gRPC's method name
        self.calls += 1
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if self.failure is not None:
            raise AioRpcError(self.failure[0], Metadata(), Metadata(), details=self.failure[1])
        self.answered += 1
        return answer()


def client(a: Held, b: Held) -> TritonClient:
    """The first call goes to A (B had more work lately); a call of one sequence usually takes 10 ms."""
    triton = TritonClient(f"{A},{B}", timeout=10, retry_after=1)
    assert triton.replicas is not None
    triton.replicas.stubs.update({A: a, B: b})
    balancer = triton.replicas.balancer
    balancer.replicas[B].load = 30.0
    balancer.expected[1] = 0.010
    return triton


async def infer_until_called(triton: TritonClient, stub: Held) -> asyncio.Future:
    """`triton.infer` running as a task, once `stub` got a call of it (the copy, or the second try)."""
    call = asyncio.ensure_future(triton.infer("encoder", INPUTS, ["embedding"]))
    while stub.calls == 0:
        await asyncio.sleep(0.005)
    return call


def hedges() -> float:
    return REGISTRY.get_sample_value("serving_triton_hedges_total", {"replica": A}) or 0.0


def test_a_call_held_past_twice_its_usual_time_is_answered_by_a_copy_on_the_other_replica():
    a, b = Held(), Held(released=True)
    triton = client(a, b)
    balancer = triton.replicas.balancer
    before = hedges()

    async def scenario():
        result = await triton.infer("encoder", INPUTS, ["embedding"])
        assert a.calls == 1 and a.cancelled == 0, "the first call runs on"
        a.release.set()
        await asyncio.gather(*triton._background_calls)
        return result

    result = asyncio.run(scenario())
    assert result["embedding"].tolist() == [[0.5, 0.25]]
    assert (a.calls, a.answered, b.answered) == (1, 1, 1)
    assert hedges() - before == 1
    assert REGISTRY.get_sample_value("serving_triton_sequences_total", {"replica": B}) >= 1
    assert balancer.replicas[A].slowness > balancer.replicas[B].slowness, "the held call's time taught the balancer"
    assert balancer.replicas[A].calls == {} == balancer.replicas[B].calls


def test_a_copy_that_loses_runs_on_with_no_caller_waiting():
    a, b = Held(), Held()
    triton = client(a, b)

    async def scenario():
        call = await infer_until_called(triton, b)  # the copy went out
        a.release.set()
        await call
        assert (b.cancelled, b.answered) == (0, 0)
        b.release.set()
        await asyncio.gather(*triton._background_calls)

    asyncio.run(scenario())
    assert (a.answered, b.calls, b.cancelled, b.answered) == (1, 1, 0, 1)
    assert triton.replicas.balancer.replicas[B].calls == {}


def test_a_caller_gone_cancels_the_call_and_its_copy():
    a, b = Held(), Held()
    triton = client(a, b)

    async def scenario():
        call = await infer_until_called(triton, b)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(scenario())
    assert (a.cancelled, b.cancelled) == (1, 1)
    assert all(not replica.calls for replica in triton.replicas.balancer.replicas.values())


def test_a_copy_that_failed_leaves_the_caller_the_first_calls_answer():
    a, b = Held(), Held(INTERNAL, released=True)
    triton = client(a, b)

    async def scenario():
        call = await infer_until_called(triton, b)
        await asyncio.sleep(0.01)  # the copy failed meanwhile
        a.release.set()
        return await call

    assert asyncio.run(scenario())["embedding"].tolist() == [[0.5, 0.25]]
    assert (a.answered, b.calls) == (1, 1)


def test_a_call_and_its_copy_that_both_fail_are_the_callers_error():
    a, b = Held(INTERNAL, released=False), Held(INTERNAL, released=True)
    triton = client(a, b)

    async def scenario():
        call = await infer_until_called(triton, b)
        a.release.set()
        await call

    with pytest.raises(ServingError):
        asyncio.run(scenario())
    assert triton.replicas.balancer.ejected() == {}, "a call that failed everywhere ejects nobody"


def test_a_call_answered_in_time_is_not_copied():
    a, b = Held(released=True), Held(released=True)
    triton = client(a, b)
    before = hedges()
    asyncio.run(triton.infer("encoder", INPUTS, ["embedding"]))
    assert (a.calls, b.calls) == (1, 0) and hedges() == before


def test_a_call_cancelled_before_it_started_is_not_left_outstanding():
    """An outstanding call makes its replica look slower every second: one left behind would hold it out for good."""
    triton = client(Held(), Held())
    balancer = triton.replicas.balancer

    async def scenario():
        call = balancer.start(1, "encoder/")
        task = triton._launch(call, None, None, 10)
        task.cancel()
        await asyncio.sleep(0)
        return call

    call = asyncio.run(scenario())
    assert balancer.replicas[call.address].calls == {}


@pytest.mark.parametrize(("failure", "reason"), [(INTERNAL, "internal"), (STOPPING, "not_found")])
def test_a_first_call_that_failed_where_its_copy_answered_charges_its_replica(failure, reason):
    """As unhedged (`test_grpc_retry`): the same call answered elsewhere makes the failure the replica's."""
    a, b = Held(failure), Held()
    triton = client(a, b)

    async def scenario():
        call = await infer_until_called(triton, b)  # the copy went out
        a.release.set()  # the first call fails
        await asyncio.sleep(0.01)
        b.release.set()  # the copy answers
        await call

    asyncio.run(scenario())
    assert triton.replicas.balancer.ejected() == {A: reason}


class Timed(Held):
    """Records the timeout each call was given."""

    def __init__(self):
        super().__init__()
        self.timeouts: list[float] = []

    async def ModelInfer(self, request, timeout, metadata):  # noqa: N802 - gRPC's method name
        self.timeouts.append(timeout)
        return await super().ModelInfer(request, timeout, metadata)


def test_a_copy_gets_what_is_left_of_the_calls_time_not_a_fresh_timeout():
    a, b = Timed(), Timed()
    triton = client(a, b)
    triton.timeout = 0.5

    async def scenario():
        call = await infer_until_called(triton, b)
        b.release.set()
        await call
        a.release.set()
        await asyncio.gather(*triton._background_calls)

    asyncio.run(scenario())
    assert a.timeouts[0] <= 0.5 and b.timeouts[0] <= a.timeouts[0] - 0.045, "the copy went out 45 ms or more later"


def test_a_call_sent_once_more_is_not_copied_back_to_the_replica_it_failed_on():
    a, b = Held(INTERNAL, released=True), Held()
    triton = client(a, b)

    async def scenario():
        call = await infer_until_called(triton, b)  # the second try, on B
        await asyncio.sleep(0.05)  # held on B past the time a copy would go out
        b.release.set()
        await call
        await asyncio.gather(*triton._background_calls)

    asyncio.run(scenario())
    assert (a.calls, b.answered) == (1, 1), "A, which failed this request, got no copy of it"

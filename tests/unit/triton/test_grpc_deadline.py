"""The request's deadline reaches Triton: each gRPC call gets what is left of it (at most the client's own timeout),
a call past it is not made, and Triton's DEADLINE_EXCEEDED says how long it was given."""

import asyncio
import time

import grpc
import numpy as np
import pytest
from grpc.aio import AioRpcError, Metadata

from services.common.deadline import deadline_var
from services.common.errors import DeadlineExceeded
from services.triton.grpc_client import TritonClient


class Stub:
    """Records each call's gRPC timeout; answers DEADLINE_EXCEEDED, as Triton does once it has passed."""

    def __init__(self):
        self.timeouts: list[float] = []

    async def ModelInfer(self, request, timeout, metadata):  # noqa: N802 - gRPC's method name
        self.timeouts.append(timeout)
        raise AioRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, Metadata(), Metadata(), details="Deadline Exceeded")


def call(deadline: float | None) -> tuple[Stub, DeadlineExceeded]:
    client = TritonClient("127.0.0.1:1", timeout=10, retry_after=1)
    client._stub = stub = Stub()

    async def run():
        deadline_var.set(deadline)
        with pytest.raises(DeadlineExceeded) as raised:
            await client.infer("encoder", {"input_ids": np.zeros((1, 4), np.int64)}, ["embedding"])
        return raised.value

    return stub, asyncio.run(run())


def test_a_call_gets_what_is_left_of_the_requests_deadline():
    before = time.monotonic()
    stub, error = call(before + 0.5)
    spent = time.monotonic() - before  # at most this much of the 0.5 s was gone when the call was made
    assert 0.5 - spent <= stub.timeouts[0] <= 0.5
    assert f"within {stub.timeouts[0]:.3g} s" in error.message


def test_without_a_deadline_a_call_gets_the_clients_timeout():
    stub, error = call(None)
    assert stub.timeouts == [10] and "within 10 s" in error.message


def test_a_call_past_the_deadline_is_not_made():
    stub, error = call(time.monotonic() - 1)
    assert stub.timeouts == [] and "deadline passed" in error.message

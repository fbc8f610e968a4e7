"""A coalesced batch whose replica went away with it is sent once more when the target names several replicas: its
connection lost (UNAVAILABLE), or the replica stopping (it cancels calls, and answers NOT_FOUND while it unloads).
Triton's own "queue is full" UNAVAILABLE is overload and keeps its 503; one Triton alone is never retried (a
restarting server would only fail again); a second failure is the caller's answer. With `least_work` (one stub per
replica here) the second try goes to another replica, INTERNAL is tried there too, and the replica that failed is
ejected (at once for a lost connection, once the other answered for INTERNAL and NOT_FOUND), with its metric."""

import asyncio

import grpc
import numpy as np
import pytest
from grpc.aio import AioRpcError, Metadata
from prometheus_client import REGISTRY
from tritonclient.grpc import service_pb2

from services.common.errors import NotFound, ServingError, Unavailable
from services.triton.grpc_client import TritonClient

REPLICAS = "127.0.0.2:8001,127.0.0.3:8001"
# What calls got from a replica killed, a replica stopping, a full queue (measured with Triton 2.51).
LOST = (grpc.StatusCode.UNAVAILABLE, "Stream removed (Socket closed)")
STOPPING = (grpc.StatusCode.NOT_FOUND, "Request for unknown model: 'encoder' has no available versions")
CANCELLED = (grpc.StatusCode.CANCELLED, "CANCELLED")
QUEUE_FULL = (grpc.StatusCode.UNAVAILABLE, "Exceeds maximum queue size")
ALL_DOWN = (grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses")
INPUTS = {"input_ids": np.zeros((1, 4), np.int64)}


def answer() -> service_pb2.ModelInferResponse:
    response = service_pb2.ModelInferResponse()
    tensor = response.outputs.add()
    tensor.name, tensor.datatype = "embedding", "FP32"
    tensor.shape.extend([1, 2])
    response.raw_output_contents.append(np.array([0.5, 0.25], np.float32).tobytes())
    return response


class Stub:
    """Fails each call with the next of `failures` (gRPC status code, details), then answers."""

    def __init__(self, *failures: tuple[grpc.StatusCode, str]):
        self.failures = list(failures)
        self.calls = 0

    async def ModelInfer(self, request, timeout, metadata):  # noqa: N802 - gRPC's method name
        self.calls += 1
        if self.failures:
            code, details = self.failures.pop(0)
            raise AioRpcError(code, Metadata(), Metadata(), details=details)
        return answer()


INTERNAL = (grpc.StatusCode.INTERNAL, "Failed to process the request(s) for model instance 'encoder_0'")
A, B = REPLICAS.split(",")


def infer(url: str, stub: Stub):
    """One call through gRPC's round_robin (one channel: one stub), or to one Triton."""
    client = TritonClient(url, timeout=10, retry_after=1, balance="round_robin")
    client._stub = stub
    return asyncio.run(client.infer("encoder", INPUTS, ["embedding"]))


def balanced(first: Stub, other: Stub) -> TritonClient:
    """A `least_work` client over A and B whose first call goes to A (B had more work lately)."""
    client = TritonClient(REPLICAS, timeout=10, retry_after=1)
    assert client.replicas is not None
    client.replicas.stubs.update({A: first, B: other})
    client.replicas.balancer.replicas[B].load = 1e6
    return client


def ejected(reason: str) -> float | None:
    return REGISTRY.get_sample_value("serving_triton_replica_ejected", {"replica": A, "reason": reason})


def ejections(reason: str) -> float:
    return REGISTRY.get_sample_value("serving_triton_ejections_total", {"replica": A, "reason": reason}) or 0.0


@pytest.mark.parametrize(
    ("failure", "reason"),
    [(LOST, "unavailable"), (CANCELLED, "unavailable"), (INTERNAL, "internal"), (STOPPING, "not_found")],
    ids=["killed", "cancelled", "internal", "model-missing"],
)
def test_least_work_sends_a_call_failed_on_one_replica_to_the_other_and_ejects_the_first(failure, reason):
    client = balanced(Stub(failure), Stub())
    before, ejected_before = retries(), ejections(reason)
    result = asyncio.run(client.infer("encoder", INPUTS, ["embedding"]))
    assert result["embedding"].tolist() == [[0.5, 0.25]]
    assert client.replicas.stubs[A].calls == 1 and client.replicas.stubs[B].calls == 1
    assert client.replicas.balancer.ejected() == {A: reason}
    assert retries() - before == 1 and ejections(reason) - ejected_before == 1 and ejected(reason) == 1
    calls = [client.replicas.balancer.start(1, "encoder/").address for _ in range(10)]
    assert set(calls) == {B}, "out of rotation"


@pytest.mark.parametrize("failure", [INTERNAL, STOPPING], ids=["internal", "model-missing"])
def test_least_work_ejects_nobody_for_a_call_that_fails_on_both(failure):
    client = balanced(Stub(failure), Stub(failure))
    with pytest.raises((NotFound, ServingError)):
        asyncio.run(client.infer("encoder", INPUTS, ["embedding"]))
    assert client.replicas.stubs[B].calls == 1 and client.replicas.balancer.ejected() == {}


def test_least_work_sends_a_full_queue_nowhere_else_and_ejects_nobody():
    client = balanced(Stub(QUEUE_FULL), Stub())
    with pytest.raises(Unavailable):
        asyncio.run(client.infer("encoder", INPUTS, ["embedding"]))
    assert client.replicas.stubs[B].calls == 0 and client.replicas.balancer.ejected() == {}


def retries() -> float:
    return REGISTRY.get_sample_value("serving_triton_retries_total")


@pytest.mark.parametrize("failure", [LOST, STOPPING, CANCELLED], ids=["killed", "stopping", "cancelled"])
def test_round_robin_sends_a_call_lost_with_its_replica_once_more_and_counts_it(failure, caplog):
    before, stub = retries(), Stub(failure)
    result = infer(REPLICAS, stub)
    assert stub.calls == 2 and result["embedding"].tolist() == [[0.5, 0.25]]
    assert retries() - before == 1
    assert "lost with its replica" in caplog.text and failure[1] in caplog.text


@pytest.mark.parametrize("url", ["dns:///triton-grpc:8001", REPLICAS])
def test_lost_twice_is_the_callers_503(url):
    stub = Stub(LOST, ALL_DOWN)
    with pytest.raises(Unavailable) as raised:
        infer(url, stub)
    assert stub.calls == 2 and raised.value.status_code == 503 and "retry shortly" in raised.value.message


def test_a_model_no_replica_has_is_404_after_one_more_try():
    stub = Stub(STOPPING, STOPPING)
    with pytest.raises(NotFound) as raised:
        infer(REPLICAS, stub)
    assert stub.calls == 2 and raised.value.status_code == 404


def test_a_full_queue_is_overload_and_not_sent_again():
    before, stub = retries(), Stub(QUEUE_FULL)
    with pytest.raises(Unavailable) as raised:
        infer(REPLICAS, stub)
    assert stub.calls == 1 and "queue for 'encoder' is full" in raised.value.message
    assert retries() == before


@pytest.mark.parametrize("failure", [LOST, STOPPING], ids=["killed", "stopping"])
def test_one_triton_alone_is_not_sent_again(failure):
    stub = Stub(failure)
    with pytest.raises((Unavailable, NotFound)):
        infer("127.0.0.1:8001", stub)
    assert stub.calls == 1

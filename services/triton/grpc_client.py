"""The gateway's connection to Triton: Triton's gRPC service (protobufs from `tritonclient.grpc`) over asyncio
channels per worker (to one Triton, or to several replicas: `services.triton.target`, each call sent to the replica
with the least work (`services.triton.balancer`) or to the next (`round_robin`)), raw tensor
contents, a deadline on every call (`timeout`, or what is left of the request's own: `services.common.deadline`),
gRPC failures mapped to the error hierarchy. A caller cancelled (its client gone) cancels its call, and gRPC cancels
it in Triton.

The request is built straight into the protobuf rather than through tritonclient's InferInput objects: profiling
showed their per-call bookkeeping as a visible share of a gateway worker's CPU time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TypeAlias

import grpc
import numpy as np
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc
from tritonclient.utils import np_to_triton_dtype, triton_to_np_dtype

from observability.metrics import TRITON_HEDGES, TRITON_RETRIES, TRITON_SEQUENCES
from observability.tracing import inject_headers, tracing_enabled
from services.common.deadline import time_left
from services.common.errors import DeadlineExceeded, InvalidInput, NotFound, ServingError, Unavailable
from services.triton.balancer import DEFAULT_POLICY, Call, Policy
from services.triton.replica_channels import ReplicaChannels
from services.triton.target import parse_target

log = logging.getLogger(__name__)
Metadata: TypeAlias = tuple[tuple[str, str], ...] | None
"""A call's gRPC metadata: the trace context's headers when tracing, else none."""


class TritonClient:
    def __init__(
        self, url: str, *, timeout: float, retry_after: float, balance: Policy = DEFAULT_POLICY, hedge: bool = True
    ):
        self.url = url
        self.hedge = hedge  # copy a call its replica holds too long to another (`_first_answer`)
        self.target = parse_target(url)  # one Triton, or several replicas: `services.triton.target`
        self.timeout = timeout
        self.retry_after = retry_after
        self.replicas = (
            ReplicaChannels(self.target, close_grace=timeout, retry_after=retry_after)
            if self.target.balanced and balance == "least_work"
            else None
        )  # None: one channel (one Triton, or gRPC's round_robin over several)
        self._channel: grpc.aio.Channel | None = None
        self._stub: service_pb2_grpc.GRPCInferenceServiceStub | None = None
        self._ready_cache: dict[str, tuple[float, bool]] = {}
        self._background_calls: set[asyncio.Future] = set()

    @property
    def stub(self) -> service_pb2_grpc.GRPCInferenceServiceStub:
        if self._stub is None:  # created lazily inside the worker's event loop
            self._channel = grpc.aio.insecure_channel(self.target.target, options=self.target.options)
            self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        return self._stub

    async def close(self) -> None:
        if self.replicas is not None:
            await self.replicas.close()
        if self._channel is not None:
            await self._channel.close()
            self._channel = self._stub = None

    def _error(self, exc: grpc.aio.AioRpcError, model: str, timeout: float | None = None) -> ServingError:
        code, message = exc.code(), exc.details() or ""
        if code == grpc.StatusCode.UNAVAILABLE:
            if _queue_full(exc):
                return Unavailable(f"Triton's queue for '{model}' is full; retry shortly", retry_after=self.retry_after)
            log.warning("Triton at %s is unavailable: %s", self.url, message)  # its address: for the log only
            return Unavailable("Triton is unavailable; retry shortly", retry_after=self.retry_after)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            waited = self.timeout if timeout is None else timeout
            return DeadlineExceeded(f"Triton did not answer within {waited:.3g} s", retry_after=self.retry_after)
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            return InvalidInput(f"Triton rejected the input: {message}")
        if code == grpc.StatusCode.NOT_FOUND or "unknown model" in message.lower():
            return NotFound(f"Triton has no model '{model}' loaded")
        log.warning("Triton failed on '%s': %s %s", model, code.name, message)
        return ServingError(f"Triton failed ({code.name}); the server log has why, under this request id")

    async def infer(
        self, model: str, inputs: dict[str, np.ndarray], outputs: list[str], *, version: str = ""
    ) -> dict[str, np.ndarray]:
        request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
        for name, array in inputs.items():
            tensor = request.inputs.add()
            tensor.name = name
            tensor.datatype = np_to_triton_dtype(array.dtype)
            tensor.shape.extend(array.shape)
            request.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
        for name in outputs:
            request.outputs.add().name = name
        metadata = (tuple(inject_headers({}).items()) or None) if tracing_enabled() else None
        if self.replicas is not None:
            response = await self._send_balanced(request, metadata, model)
        else:
            response = await self._send(request, metadata, model)
        result = {}
        for tensor, raw in zip(response.outputs, response.raw_output_contents, strict=True):
            result[tensor.name] = np.frombuffer(raw, dtype=triton_to_np_dtype(tensor.datatype)).reshape(tensor.shape)
        missing = set(outputs) - set(result)
        if missing:
            raise ServingError(f"Triton's answer lacks the outputs {sorted(missing)}")
        return result

    async def _send(
        self, request: service_pb2.ModelInferRequest, metadata: Metadata, model: str
    ) -> service_pb2.ModelInferResponse:
        """One ModelInfer call with what is left of the request's deadline. With several replicas a call that
        failed because its replica is going away is sent once more (inference has no side effects): round_robin
        sends it to the next replica, and a replica whose connection closed is out of its rotation already. A full
        queue is overload: never sent again, its 503 tells the caller to slow down. One Triton alone: never sent
        again (a Triton that is away answers the second call no better)."""
        for attempt in (1, 2):
            timeout = time_left(self.timeout)  # the request's own deadline, if nearer: Triton drops it past that
            if timeout <= 0:
                raise DeadlineExceeded("the request's deadline passed before its Triton call")
            try:
                return await self.stub.ModelInfer(request, timeout=timeout, metadata=metadata)
            except grpc.aio.AioRpcError as exc:
                if attempt == 2 or not (self.target.balanced and _replica_leaving(exc)):
                    raise self._error(exc, model, timeout) from None
                log.warning("Triton call to '%s' lost with its replica (%s); sent once more", model, exc.details())
                TRITON_RETRIES.inc()

    async def _send_balanced(
        self, request: service_pb2.ModelInferRequest, metadata: Metadata, model: str
    ) -> service_pb2.ModelInferResponse:
        """One ModelInfer call to the replica the balancer picks, hedged on another while it keeps its caller
        waiting (`_first_answer`), and sent once more to another replica if it failed there for a reason another
        replica may not share (`_failure`: inference has no side effects). A lost connection ejects its replica at
        once; INTERNAL or NOT_FOUND only once another replica answered the same call (a request that fails everywhere
        is the caller's, not a replica's). A full queue, a deadline, bad input: never sent again, no replica
        charged."""
        assert self.replicas is not None
        await self.replicas.refresh()
        balancer = self.replicas.balancer
        scope = f"{model}/{request.model_version}"
        size = int(request.inputs[0].shape[0]) if request.inputs and request.inputs[0].shape else 1
        suspect: tuple[Call, str] | None = None  # charged to its replica if another answers
        exclude: tuple[str, ...] = ()
        for attempt in (1, 2):
            timeout = time_left(self.timeout)  # the request's own deadline, if nearer: Triton drops it past that
            if timeout <= 0:
                raise DeadlineExceeded("the request's deadline passed before its Triton call")
            call = balancer.start(size, scope, exclude)
            if attempt == 1 and (copy := balancer.shadow(size, scope)) is not None:
                self._background(self._launch(copy, request, metadata, self.timeout))
            try:
                response, call, failures = await self._first_answer(call, request, metadata, timeout, exclude)
            except _Failed as failed:
                exc, call = failed.error, failed.call
                reason = _failure(exc)
                if attempt == 2 or reason is None:
                    raise self._error(exc, model, timeout) from None
                log.warning(
                    "Triton call to '%s' failed on replica %s (%s: %s); sent once more, to another",
                    model,
                    call.address,
                    exc.code().name,
                    exc.details(),
                )
                TRITON_RETRIES.inc()
                suspect = None if reason == "unavailable" else (call, reason)
                exclude = (call.address,)
                continue
            TRITON_SEQUENCES.labels(call.address).inc(size)
            suspects = [suspect] if suspect is not None else []
            suspects += [(failed.call, reason) for failed in failures if (reason := _failure(failed.error))]
            for sent, reason in suspects:  # another replica answered the same call: theirs, not the caller's
                if sent.address != call.address and reason != "unavailable":  # a lost connection was charged at once
                    balancer.failed(sent, reason)
            return response

    async def _first_answer(
        self,
        call: Call,
        request: service_pb2.ModelInferRequest,
        metadata: Metadata,
        timeout: float,
        exclude: tuple[str, ...],
    ) -> tuple[service_pb2.ModelInferResponse, Call, list[_Failed]]:
        """`call`'s answer, the call that gave it and the calls that failed before it. Unanswered past the balancer's
        `hedge_after`, a copy goes to another replica (none of `exclude`) with what is left of `timeout`, and the first
        answer wins; the call that lost runs on with no caller waiting, so its time still tells the balancer how fast
        its replica is (and Triton, which answered cancelled calls with a stall of its replica, is not asked to cancel
        it). `_Failed` (the first call's error) when every call sent failed; every call cancelled when the caller is
        gone."""
        assert self.replicas is not None
        balancer = self.replicas.balancer
        deadline = time.monotonic() + timeout
        first = self._launch(call, request, metadata, timeout)
        pending = {first: call}
        failures: list[_Failed] = []
        answered = False
        try:
            delay = balancer.hedge_after(call) if self.hedge else None
            if delay is not None and delay < timeout:
                await asyncio.wait([first], timeout=delay)
                left = deadline - time.monotonic()
                copy = None if first.done() or left <= 0 else balancer.hedge(call, exclude)
                if copy is not None:
                    TRITON_HEDGES.labels(call.address).inc()
                    pending[self._launch(copy, request, metadata, left)] = copy
            while pending:
                done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in sorted(done, key=lambda task: task is not first):
                    sent = pending.pop(task)
                    error = task.exception()
                    if error is None:
                        answered = True
                        return task.result(), sent, failures
                    if not isinstance(error, grpc.aio.AioRpcError):
                        raise error
                    failures.append(_Failed(error, sent))
            raise next((failed for failed in failures if failed.call is call), failures[0])
        finally:
            for task in pending:
                if answered:
                    self._background(task)
                else:
                    task.cancel()

    def _launch(
        self, call: Call, request: service_pb2.ModelInferRequest, metadata: Metadata, timeout: float
    ) -> asyncio.Task:
        """`call` running as a task (`_call`); cancelled (even before it started) or failed for a reason of its own,
        the balancer is told it ended with no verdict."""
        assert self.replicas is not None
        balancer = self.replicas.balancer

        def ended(task: asyncio.Task) -> None:
            if task.cancelled() or not isinstance(task.exception(), grpc.aio.AioRpcError | None):
                balancer.abandoned(call)

        task = asyncio.ensure_future(self._call(call, request, metadata, timeout))
        task.add_done_callback(ended)
        return task

    async def _call(
        self, call: Call, request: service_pb2.ModelInferRequest, metadata: Metadata, timeout: float
    ) -> service_pb2.ModelInferResponse:
        """One ModelInfer call to `call`'s replica, its outcome told to the balancer: an answer teaches it the
        replica's speed, a lost connection ejects the replica; any other failure says nothing yet (`_send_balanced`
        charges INTERNAL and NOT_FOUND once another replica answered)."""
        assert self.replicas is not None
        balancer = self.replicas.balancer
        try:
            response = await self.replicas.stub(call.address).ModelInfer(request, timeout=timeout, metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            if _failure(exc) == "unavailable":
                balancer.failed(call, "unavailable")
            else:
                balancer.abandoned(call)
            raise
        balancer.succeeded(call)
        return response

    def _background(self, work: asyncio.Task) -> None:
        """Run `work` (a call: a shadow copy, or a first call a copy answered for) with no caller waiting; what it
        answers went to the balancer already."""
        task = asyncio.ensure_future(work)
        self._background_calls.add(task)
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Future) -> None:
        self._background_calls.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: its outcome is the balancer's, not a caller's

    async def model_device(self, model: str, version: str = "") -> str:
        """The device `model` runs on, as its Triton configuration declares it (`config_device`)."""
        request = service_pb2.ModelConfigRequest(name=model, version=version)
        try:
            response = await (await self._status_stub()).ModelConfig(request, timeout=min(self.timeout, 2.0))
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, model) from None
        return config_device(response.config)

    async def model_ready(self, model: str | None, version: str = "", max_age: float = 1.0) -> bool:
        """Whether Triton serves `model` (`version`; None: whether the server is ready at all) now; cached for
        `max_age` seconds so probes do not hammer Triton."""
        key = f"{model}/{version}"
        checked, ready = self._ready_cache.get(key, (0.0, False))
        if time.monotonic() - checked < max_age:
            return ready
        timeout = min(self.timeout, 2.0)
        ready = False
        for stub in await self._status_stubs():  # several replicas: ready while one of them is
            try:
                if model is None:
                    ready = (await stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=timeout)).ready
                else:
                    request = service_pb2.ModelReadyRequest(name=model, version=version)
                    ready = (await stub.ModelReady(request, timeout=timeout)).ready
            except grpc.aio.AioRpcError:
                ready = False
            if ready:
                break
        self._ready_cache[key] = (time.monotonic(), ready)
        return ready

    async def _status_stubs(self) -> list[service_pb2_grpc.GRPCInferenceServiceStub]:
        """Where to ask about Triton's state: its one channel, or every replica, those in rotation first."""
        if self.replicas is None:
            return [self.stub]
        await self.replicas.refresh()
        ejected = self.replicas.balancer.ejected()
        addresses = sorted(self.replicas.balancer.replicas, key=lambda address: address in ejected)
        return [self.replicas.stub(address) for address in addresses]

    async def _status_stub(self) -> service_pb2_grpc.GRPCInferenceServiceStub:
        return (await self._status_stubs())[0]


class _Failed(Exception):
    """Every call sent for one request failed: the first call's error, and that call."""

    def __init__(self, error: grpc.aio.AioRpcError, call: Call):
        super().__init__(error)
        self.error, self.call = error, call


def config_device(config: model_config_pb2.ModelConfig) -> str:
    """`sim` for a model whose `device` parameter says so (the simulated accelerator), `gpu` for one with a KIND_GPU
    instance group or a `device: cuda` parameter (the Python backend's encoder on CUDA), else `cpu`; any other
    parameter value is not trusted and reads as `cpu`."""
    declared = config.parameters["device"].string_value if "device" in config.parameters else ""
    if declared == "sim":
        return "sim"
    gpu = model_config_pb2.ModelInstanceGroup.KIND_GPU
    return "gpu" if declared == "cuda" or any(group.kind == gpu for group in config.instance_group) else "cpu"


def _queue_full(exc: grpc.aio.AioRpcError) -> bool:
    """Triton's own UNAVAILABLE for a full queue (overload), not a connection lost."""
    return "queue" in (exc.details() or "").lower()


def _failure(exc: grpc.aio.AioRpcError) -> str | None:
    """What a failed call says about its replica (`balancer.REASONS`), or None when it says nothing and the call is
    not sent again: a full queue (overload), a deadline, input Triton refused."""
    if _replica_leaving(exc):
        code = exc.code()
        return (
            "not_found"
            if code == grpc.StatusCode.NOT_FOUND or "unknown model" in (exc.details() or "")
            else ("unavailable")
        )
    return "internal" if exc.code() == grpc.StatusCode.INTERNAL else None


def _replica_leaving(exc: grpc.aio.AioRpcError) -> bool:
    """Whether the call failed because its replica is going away: its connection lost (UNAVAILABLE, not a full
    queue: killed, host gone, keepalive unanswered), the call cancelled by the server as it stops, or the model
    unknown to it. On SIGTERM Triton unloads its models first and answers NOT_FOUND until it closes its port (2-3 s
    with the tiny model), and those calls are sent once more (docs/decisions/triton-defaults.md)."""
    code = exc.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return not _queue_full(exc)
    return code in (grpc.StatusCode.CANCELLED, grpc.StatusCode.NOT_FOUND) or "unknown model" in (exc.details() or "")

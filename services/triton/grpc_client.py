"""The gateway's connection to Triton: Triton's gRPC service (protobufs from `tritonclient.grpc`) over one asyncio
channel per worker (to one Triton, or balanced over several replicas: `services.triton.target`), raw tensor
contents, a deadline on every call (`timeout`, or what is left of the request's own: `services.common.deadline`),
gRPC failures mapped to the error hierarchy. A caller cancelled (its client gone) cancels its call, and gRPC cancels
it in Triton.

The request is built straight into the protobuf rather than through tritonclient's InferInput objects: profiling
showed their per-call bookkeeping as a visible share of a gateway worker's CPU time.
"""

from __future__ import annotations

import logging
import time

import grpc
import numpy as np
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc
from tritonclient.utils import np_to_triton_dtype, triton_to_np_dtype

from observability.metrics import TRITON_RETRIES
from observability.tracing import inject_headers, tracing_enabled
from services.common.deadline import time_left
from services.common.errors import DeadlineExceeded, InvalidInput, NotFound, ServingError, Unavailable
from services.triton.target import parse_target

log = logging.getLogger(__name__)


class TritonClient:
    def __init__(self, url: str, *, timeout: float, retry_after: float):
        self.url = url
        self.target = parse_target(url)  # one Triton, or several replicas: `services.triton.target`
        self.timeout = timeout
        self.retry_after = retry_after
        self._channel: grpc.aio.Channel | None = None
        self._stub: service_pb2_grpc.GRPCInferenceServiceStub | None = None
        self._ready_cache: dict[str, tuple[float, bool]] = {}

    @property
    def stub(self) -> service_pb2_grpc.GRPCInferenceServiceStub:
        if self._stub is None:  # created lazily inside the worker's event loop
            self._channel = grpc.aio.insecure_channel(self.target.target, options=self.target.options)
            self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        return self._stub

    async def close(self) -> None:
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
        response = await self._send(request, metadata, model)
        result = {}
        for tensor, raw in zip(response.outputs, response.raw_output_contents, strict=True):
            result[tensor.name] = np.frombuffer(raw, dtype=triton_to_np_dtype(tensor.datatype)).reshape(tensor.shape)
        missing = set(outputs) - set(result)
        if missing:
            raise ServingError(f"Triton's answer lacks the outputs {sorted(missing)}")
        return result

    async def _send(self, request: service_pb2.ModelInferRequest, metadata, model: str):
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

    async def model_device(self, model: str, version: str = "") -> str:
        """The device `model` runs on, as its Triton configuration declares it (`config_device`)."""
        request = service_pb2.ModelConfigRequest(name=model, version=version)
        try:
            response = await self.stub.ModelConfig(request, timeout=min(self.timeout, 2.0))
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
        try:
            if model is None:
                ready = (await self.stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=timeout)).ready
            else:
                request = service_pb2.ModelReadyRequest(name=model, version=version)
                ready = (await self.stub.ModelReady(request, timeout=timeout)).ready
        except grpc.aio.AioRpcError:
            ready = False
        self._ready_cache[key] = (time.monotonic(), ready)
        return ready


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


def _replica_leaving(exc: grpc.aio.AioRpcError) -> bool:
    """Whether the call failed because its replica is going away: its connection lost (UNAVAILABLE, not a full
    queue: killed, host gone, keepalive unanswered), the call cancelled by the server as it stops, or the model
    unknown to it. On SIGTERM Triton unloads its models first and answers NOT_FOUND until it closes its port (2-3 s
    with the tiny model), and those calls are sent once more (docs/decisions/triton-defaults.md)."""
    code = exc.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return not _queue_full(exc)
    return code in (grpc.StatusCode.CANCELLED, grpc.StatusCode.NOT_FOUND) or "unknown model" in (exc.details() or "")

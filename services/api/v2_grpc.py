"""Open Inference Protocol (KServe v2) over gRPC: `inference.GRPCInferenceService`, so `tritonclient.grpc` and KServe's
gRPC clients call a server as they call Triton. The messages and the servicer base are the ones `tritonclient` ships
(`tritonclient.grpc.service_pb2`, generated from the protocol's `grpc_service.proto`).

A server runs it beside its HTTP routes, in each worker's own event loop, on the data plane the HTTP edge uses: the same
model names (`catalog`), the same checks of the request (`v2_request`), the same prediction path and stage metrics
(`DataPlane.infer`). The HTTP edge's steps are taken here for each call: the API key (gRPC metadata `authorization:
Bearer <key>`), an in-flight slot (`Gate.enter`), the deadline (the caller's gRPC deadline or `request_timeout`, the
shorter), the access metrics under the method's path as route, with the HTTP status the outcome maps to as code, and
when tracing, a server span joined to the caller's `traceparent` metadata (the Triton call beneath it is its child).
Errors carry the status code the HTTP status maps to (`STATUS`) and the same message, with the request id
(`x-request-id`) in the trailing metadata and `retry-after` where retrying helps. Every worker binds the one port with
SO_REUSEPORT: the kernel spreads connections over the workers, and a connection's calls all go to its worker
(docs/decisions/grpc-edge.md). Methods the protocol has beyond live, ready, metadata and infer (streaming, model
repository, shared memory) answer UNIMPLEMENTED."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import struct
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import grpc
import numpy as np
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from observability import metrics
from observability.logging import request_id_var, trace_id_var
from observability.tally import TALLY
from observability.tracing import extract_context, get_tracer, tracing_enabled
from services.api.admission import Gate
from services.api.auth import ApiKeys
from services.api.dataplane import DataPlane, Prediction
from services.api.edge import REQUEST_ID
from services.api.errors import UNHANDLED
from services.api.v2 import model_metadata_of, server_metadata_of
from services.api.v2_request import Inference, inference, validated_request
from services.common.backend import ServedModel
from services.common.deadline import deadline_var
from services.common.errors import ConfigurationError, DeadlineExceeded, InvalidInput, ServingError, Unauthorized
from services.common.settings import ApiSettings

log = logging.getLogger(__name__)
T = TypeVar("T")

SERVICE = "inference.GRPCInferenceService"
STATUS = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    404: grpc.StatusCode.NOT_FOUND,
    413: grpc.StatusCode.INVALID_ARGUMENT,
    422: grpc.StatusCode.INVALID_ARGUMENT,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}
"""The gRPC status of each HTTP status an error has; any other is INTERNAL."""
CLIENT_GONE = 499
"""The access metrics' code for a call its client cancelled (nginx's "client closed request", as on HTTP)."""
STOP_GRACE = 10.0
"""Seconds calls under way get to finish when the worker stops."""
_PREFIX = struct.Struct("<I")


def _request_ids():
    """Unique per process, told apart from the HTTP edge's by their prefix."""
    prefix = f"grpc-{os.urandom(6).hex()}"
    for number in itertools.count(1):
        yield f"{prefix}-{number:x}"


def _request_id(context: grpc.aio.ServicerContext, ids: Iterator[str]) -> str:
    """The caller's `x-request-id` metadata if short and safe (as on HTTP: `edge.REQUEST_ID`), else one of ours."""
    for key, value in context.invocation_metadata():
        if key == "x-request-id" and isinstance(value, str) and REQUEST_ID.fullmatch(value.encode()):
            return value
    return next(ids)


class InferenceService(service_pb2_grpc.GRPCInferenceServiceServicer):
    """One per worker, over the worker's data plane."""

    def __init__(self, dataplane: DataPlane, gate: Gate, keys: ApiKeys | None, timeout: float):
        self.dataplane = dataplane
        self.gate = gate
        self.keys = keys
        self.timeout = timeout
        self.request_ids = _request_ids()
        self.tracer = get_tracer(__name__)

    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerLiveResponse:
        async def live() -> pb.ServerLiveResponse:
            return pb.ServerLiveResponse(live=True)

        return await self._call("ServerLive", context, live)

    async def ServerReady(
        self, request: pb.ServerReadyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerReadyResponse:
        async def ready() -> pb.ServerReadyResponse:
            return pb.ServerReadyResponse(ready=await self.dataplane.is_ready())

        return await self._call("ServerReady", context, ready)

    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerMetadataResponse:
        async def metadata() -> pb.ServerMetadataResponse:
            return pb.ServerMetadataResponse(**server_metadata_of())

        return await self._call("ServerMetadata", context, metadata)

    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelReadyResponse:
        async def ready() -> pb.ModelReadyResponse:
            self._model(request.name, request.version)  # NOT_FOUND for a name the server does not serve
            return pb.ModelReadyResponse(ready=await self.dataplane.is_ready())

        return await self._call("ModelReady", context, ready)

    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelMetadataResponse:
        async def metadata() -> pb.ModelMetadataResponse:
            found = model_metadata_of(self.dataplane, self._model(request.name, request.version))
            return pb.ModelMetadataResponse(
                name=found["name"],
                versions=found["versions"],
                platform=found["platform"],
                inputs=[pb.ModelMetadataResponse.TensorMetadata(**tensor) for tensor in found["inputs"]],
                outputs=[pb.ModelMetadataResponse.TensorMetadata(**tensor) for tensor in found["outputs"]],
            )

        return await self._call("ModelMetadata", context, metadata)

    async def ModelInfer(
        self, request: pb.ModelInferRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelInferResponse:
        async def infer() -> pb.ModelInferResponse:
            served = self._model(request.model_name, request.model_version)

            async def parse() -> tuple[ServedModel, list[str], Inference]:
                checked = parse_infer(request, served.manifest.output.name)
                return served, checked.texts, checked

            return await self.dataplane.infer(parse, render)

        return await self._call("ModelInfer", context, infer, inference=True)

    def _model(self, name: str, version: str) -> ServedModel:
        return self.dataplane.catalog.model_for(name, version or None)

    async def _call(
        self, method: str, context: grpc.aio.ServicerContext, work: Callable[[], Awaitable[T]], inference: bool = False
    ) -> T:
        """`work` behind the edge's steps, under its request id and, when tracing, a server span joined to the
        caller's `traceparent` metadata; its outcome in the access metrics."""
        route = f"/{SERVICE}/{method}"
        token = request_id_var.set(_request_id(context, self.request_ids))
        start = time.perf_counter()
        outcome = _Outcome()
        try:
            if not tracing_enabled():
                return await self._answer(route, context, work, inference, outcome)
            metadata = {key: value for key, value in context.invocation_metadata() if isinstance(value, str)}
            with self.tracer.start_as_current_span(
                route,
                context=extract_context(metadata),
                kind=SpanKind.SERVER,
                attributes={"rpc.system": "grpc", "rpc.service": SERVICE, "rpc.method": method},
                record_exception=False,  # a refusal ends the handler with gRPC's abort exception: not an error here
                set_status_on_exception=False,
            ) as span:
                trace_token = trace_id_var.set(format(span.get_span_context().trace_id, "032x"))
                try:
                    return await self._answer(route, context, work, inference, outcome)
                finally:
                    trace_id_var.reset(trace_token)
                    span.set_attribute("rpc.grpc.status_code", outcome.grpc.value[0])
                    if outcome.status >= 500:
                        span.set_status(trace.Status(trace.StatusCode.ERROR))
        finally:
            TALLY.inc(metrics.child(metrics.REQUESTS, route, str(outcome.status)))
            TALLY.observe(metrics.child(metrics.REQUEST_LATENCY, route), time.perf_counter() - start)
            request_id_var.reset(token)

    async def _answer(
        self,
        route: str,
        context: grpc.aio.ServicerContext,
        work: Callable[[], Awaitable[T]],
        inference: bool,
        outcome: _Outcome,
    ) -> T:
        """The key, then for an inference a slot and the deadline, then `work`; a ServingError is answered with its
        status and message, the request id and (when retrying helps) `retry-after` in the trailing metadata."""
        try:
            if self.keys is not None and not self.keys.allowed(_headers(context)):
                raise Unauthorized("send an API key as gRPC metadata 'authorization: Bearer <key>'")
            result = await (self._admitted(context, work) if inference else work())
            outcome.status, outcome.grpc = 200, grpc.StatusCode.OK
            return result
        except ServingError as error:
            outcome.status = error.status_code
            outcome.grpc = STATUS.get(error.status_code, grpc.StatusCode.INTERNAL)
            if error.status_code >= 500:
                log.warning("%s -> %d: %s", route, error.status_code, error.message, extra={"status": outcome.status})
            trailing = [("x-request-id", request_id_var.get())]
            if error.retry_after is not None:
                trailing.append(("retry-after", str(max(1, round(error.retry_after)))))
            context.set_trailing_metadata(tuple(trailing))
            await context.abort(outcome.grpc, error.message)
            raise  # abort raises; never reached
        except asyncio.CancelledError:
            outcome.status, outcome.grpc = CLIENT_GONE, grpc.StatusCode.CANCELLED
            raise
        except Exception:  # noqa: BLE001 - answered INTERNAL, as HTTP's 500, its traceback in the log
            request_id = request_id_var.get()
            log.exception("unhandled error on %s", route, extra=UNHANDLED)
            context.set_trailing_metadata((("x-request-id", request_id),))
            await context.abort(
                grpc.StatusCode.INTERNAL,
                f"internal error; the server log has it under request id {request_id} (`serving logs --request-id`)",
            )
            raise

    async def _admitted(self, context: grpc.aio.ServicerContext, work: Callable[[], Awaitable[T]]) -> T:
        """`work` in an in-flight slot, under the shorter of the caller's deadline and the server's timeout."""
        self.gate.enter()
        try:
            remaining = context.time_remaining()
            timeout = self.timeout if remaining is None else min(remaining, self.timeout)
            deadline = deadline_var.set(time.monotonic() + timeout)
            try:
                async with asyncio.timeout(timeout):
                    return await work()
            except TimeoutError:
                raise DeadlineExceeded(
                    f"no answer within the request's deadline of {timeout:g} s (its gRPC deadline, or the server's "
                    "REQUEST_TIMEOUT); its work was dropped: retry with a longer deadline or a smaller request"
                ) from None
            finally:
                deadline_var.reset(deadline)
        finally:
            self.gate.leave()


class _Outcome:
    """How a call ended: the HTTP status it maps to (the access metrics' code) and its gRPC status."""

    __slots__ = ("status", "grpc")

    def __init__(self):
        self.status = 500
        self.grpc = grpc.StatusCode.INTERNAL


def _headers(context: grpc.aio.ServicerContext) -> list[tuple[bytes, bytes]]:
    return [(key.encode(), value.encode()) for key, value in context.invocation_metadata() if isinstance(value, str)]


def parse_infer(request: pb.ModelInferRequest, output: str) -> Inference:
    """The request's texts, checked as the HTTP edge checks its JSON and binary tensors: the input's name, datatype
    and shape, the requested outputs, then the BYTES elements (`raw_input_contents`, as tritonclient sends them, or
    `contents.bytes_contents`) against the shape."""
    if len(request.raw_input_contents) not in (0, len(request.inputs)):
        raise InvalidInput(
            f"field 'raw_input_contents': {len(request.raw_input_contents)} tensors for {len(request.inputs)} "
            "inputs: send one per input, or none and the texts in 'contents.bytes_contents'",
            param="raw_input_contents",
        )
    inputs: list[dict[str, Any]] = [
        {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)} for tensor in request.inputs
    ]
    blob = b""
    if request.inputs:
        if request.raw_input_contents:
            blob = request.raw_input_contents[0]
        elif request.inputs[0].contents.bytes_contents:
            blob = b"".join(_PREFIX.pack(len(text)) + text for text in request.inputs[0].contents.bytes_contents)
        else:
            raise InvalidInput(
                "field 'inputs.0': no texts: send them in 'raw_input_contents' (each a 4-byte little-endian length "
                "and its UTF-8 bytes, as tritonclient does) or in 'contents.bytes_contents'",
                param="inputs.0",
            )
        inputs[0]["parameters"] = {"binary_data_size": len(blob)}
    header: dict[str, Any] = {"inputs": inputs}
    if request.id:
        header["id"] = request.id
    if request.outputs:
        header["outputs"] = [{"name": requested.name} for requested in request.outputs]
    return inference(validated_request(header), blob, output)


def render(model: ServedModel, prediction: Prediction, request: Inference) -> pb.ModelInferResponse:
    """The contract output as one tensor in `raw_output_contents` (what tritonclient's `as_numpy` reads)."""
    output = model.manifest.output
    array: np.ndarray = np.ascontiguousarray(prediction.outputs.astype(output.numpy_dtype, copy=False))
    return pb.ModelInferResponse(
        model_name=model.endpoint,
        model_version=model.version,
        id=request.request.id or "",
        outputs=[pb.ModelInferResponse.InferOutputTensor(name=output.name, datatype=output.dtype, shape=array.shape)],
        raw_output_contents=[array.tobytes()],
    )


async def start_grpc(
    dataplane: DataPlane, gate: Gate, keys: ApiKeys | None, settings: ApiSettings, port: int, setting: str
) -> grpc.aio.Server:
    """The service on `settings.host:port` in this worker's event loop, SO_REUSEPORT on so every worker binds the
    port; messages up to `max_body_bytes`, as HTTP bodies. A port it cannot bind is a ConfigurationError naming
    `setting`: the worker does not start."""
    server = grpc.aio.server(
        options=[
            ("grpc.so_reuseport", 1),
            ("grpc.max_receive_message_length", settings.max_body_bytes),
            ("grpc.max_send_message_length", -1),
        ]
    )
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
        InferenceService(dataplane, gate, keys, settings.request_timeout), server
    )
    address = f"{settings.host}:{port}"
    try:
        server.add_insecure_port(address)
    except RuntimeError:
        raise ConfigurationError(
            f"cannot listen for gRPC on {address}: the port is in use by another program, or the address is not "
            f"this host's; set {setting} to a free port, or 0 to serve no gRPC"
        ) from None
    await server.start()
    log.info("Open Inference Protocol over gRPC on %s", address)
    return server

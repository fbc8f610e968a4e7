"""The gRPC edge's own steps, without a server: what reaches the data plane, and the status each refusal gets
(tests/integration/gateway/test_grpc.py calls a real gateway with tritonclient)."""

from __future__ import annotations

import asyncio
import socket
import struct

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from services.api import v2_grpc
from services.api.admission import Gate
from services.api.auth import ApiKeys
from services.api.v2_grpc import InferenceService, start_grpc
from services.common.errors import ConfigurationError, Unavailable
from tests.unit.api.fakes import make_dataplane


class Aborted(Exception):
    pass


class Context:
    """What the handlers read of `grpc.aio.ServicerContext`; `abort` raises, as gRPC's does."""

    def __init__(self, metadata=(), remaining: float | None = None):
        self.metadata = tuple(metadata)
        self.remaining = remaining
        self.trailing: tuple = ()
        self.code: grpc.StatusCode | None = None
        self.details = ""

    def invocation_metadata(self):
        return self.metadata

    def time_remaining(self):
        return self.remaining

    def set_trailing_metadata(self, metadata):
        self.trailing = tuple(metadata)

    async def abort(self, code, details):
        self.code, self.details = code, details
        raise Aborted


def _request(texts: list[bytes], raw: bool = True, shape: list[int] | None = None) -> pb.ModelInferRequest:
    tensor = pb.ModelInferRequest.InferInputTensor(name="TEXT", datatype="BYTES", shape=shape or [len(texts), 1])
    request = pb.ModelInferRequest(model_name="minilm", inputs=[tensor])
    if raw:
        request.raw_input_contents.append(b"".join(struct.pack("<I", len(t)) + t for t in texts))
    else:
        tensor = request.inputs[0]
        tensor.contents.bytes_contents.extend(texts)
    return request


@pytest.fixture
def service(tmp_path):
    dataplane = make_dataplane(tmp_path)
    return InferenceService(dataplane, Gate(dataplane.settings.max_inflight), None, timeout=5.0)


def _call(service, request, context=None):
    context = context or Context()

    async def run():
        try:
            return await service.ModelInfer(request, context)
        except Aborted:
            return None

    return asyncio.run(run()), context


@pytest.mark.parametrize("raw", [True, False])
@pytest.mark.parametrize("traced", [False, True])
def test_texts_in_raw_contents_or_in_bytes_contents_reach_the_model_alike(service, raw, traced, monkeypatch):
    monkeypatch.setattr(v2_grpc, "tracing_enabled", lambda: traced)  # the span's path runs (recording nothing)
    response, context = _call(service, _request([b"hello world", b"a"], raw=raw))
    assert context.code is None, context.details
    rows = np.frombuffer(response.raw_output_contents[0], dtype=np.float32).reshape(list(response.outputs[0].shape))
    assert rows.shape == (2, 1) and rows[0, 0] > rows[1, 0]  # CountingBackend: each row its text's token count


@pytest.mark.parametrize("traced", [False, True])
def test_a_tensor_without_texts_or_with_contents_for_other_inputs_is_invalid(service, traced, monkeypatch):
    monkeypatch.setattr(v2_grpc, "tracing_enabled", lambda: traced)
    empty = _request([b"a"], raw=False)
    empty.inputs[0].contents.Clear()
    _, context = _call(service, empty)
    assert context.code == grpc.StatusCode.INVALID_ARGUMENT and "raw_input_contents" in context.details
    twice = _request([b"a"])
    twice.raw_input_contents.append(b"")
    _, context = _call(service, twice)
    assert context.code == grpc.StatusCode.INVALID_ARGUMENT and "2 tensors for 1 inputs" in context.details


def test_a_full_worker_refuses_with_resource_exhausted_and_retry_after(service):
    for _ in range(service.gate.limit):
        service.gate.enter()
    _, context = _call(service, _request([b"a"]))
    assert context.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "SERVING_MAX_INFLIGHT" in context.details
    trailing = dict(context.trailing)
    assert trailing["retry-after"] == "1" and trailing["x-request-id"].startswith("grpc-")
    assert service.dataplane.backend.calls == 0
    assert service.gate.inflight == service.gate.limit  # the refused call took no slot


def test_an_unavailable_backend_is_unavailable_and_a_late_answer_deadline_exceeded(service, monkeypatch):
    async def down(model, texts, truncate=None):
        raise Unavailable("Triton is not reachable", retry_after=2)

    monkeypatch.setattr(service.dataplane, "predict", down)
    _, context = _call(service, _request([b"a"]))
    assert context.code == grpc.StatusCode.UNAVAILABLE and dict(context.trailing)["retry-after"] == "2"

    async def slow(model, texts, truncate=None):
        await asyncio.sleep(5)

    monkeypatch.setattr(service.dataplane, "predict", slow)
    _, context = _call(service, _request([b"a"]), Context(remaining=0.05))
    assert context.code == grpc.StatusCode.DEADLINE_EXCEEDED and "0.05 s" in context.details
    assert service.gate.inflight == 0


def test_an_unexpected_error_is_internal_naming_the_request_id(service, monkeypatch):
    async def broken(model, texts, truncate=None):
        raise KeyError("a bug")

    monkeypatch.setattr(service.dataplane, "predict", broken)
    _, context = _call(service, _request([b"a"]))
    request_id = dict(context.trailing)["x-request-id"]
    assert context.code == grpc.StatusCode.INTERNAL and request_id in context.details
    assert service.gate.inflight == 0


def test_with_keys_every_method_needs_one_in_the_metadata(service):
    service.keys = ApiKeys([b"k1"], protect_metrics=False)

    async def ready(context):
        try:
            return await service.ServerReady(pb.ServerReadyRequest(), context)
        except Aborted:
            return None

    refused = Context([("authorization", "Bearer other")])
    assert asyncio.run(ready(refused)) is None and refused.code == grpc.StatusCode.UNAUTHENTICATED
    assert asyncio.run(ready(Context([("authorization", "Bearer k1")]))).ready


def test_the_callers_request_id_is_kept_when_safe_as_on_http(service):
    for given, kept in (("trace-me-42", True), ("bad id\nwith a newline", False)):
        empty = _request([b"a"], raw=False)
        empty.inputs[0].contents.Clear()
        _, context = _call(service, empty, Context([("x-request-id", given)]))
        assert (dict(context.trailing)["x-request-id"] == given) is kept


def test_a_port_another_program_holds_stops_the_worker_naming_the_setting(tmp_path):
    dataplane = make_dataplane(tmp_path, host="127.0.0.1")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(ConfigurationError, match=f"127.0.0.1:{port}.*set GATEWAY_GRPC_PORT to a free port"):
            asyncio.run(start_grpc(dataplane, Gate(1), None, dataplane.settings, port, "GATEWAY_GRPC_PORT"))

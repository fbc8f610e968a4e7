"""The Open Inference Protocol over gRPC on the gateway, with Triton's own clients (`tritonclient.grpc`, sync and
asyncio) as real callers: one gateway with an API key, its HTTP v2 routes as the reference."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from services.modelbuild.export import VALIDATION_TEXTS
from tests.support.models import reference_outputs as reference
from tests.support.servers import start_gateway, worker_pids

TEXTS = VALIDATION_TEXTS[:3]
KEY = "grpc-test-key"
AUTH = {"authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def keyed_gateway(tmp_path_factory, tiny_model, triton):
    server = start_gateway(
        tmp_path_factory.mktemp("gateway-grpc"), tiny_model, triton, env={"SERVING_API_KEYS": json.dumps([KEY])}
    )
    yield server
    server.launcher.stop_all()


def _texts(texts: list[str], module=grpcclient) -> object:
    tensor = module.InferInput("TEXT", [len(texts), 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[t.encode()] for t in texts], dtype=object))
    return tensor


def test_tritonclient_grpc_gets_the_embeddings_http_v2_gives(keyed_gateway, tiny_model):
    client = grpcclient.InferenceServerClient(keyed_gateway.grpc_address)
    assert client.is_server_live(headers=AUTH) and client.is_server_ready(headers=AUTH)
    assert client.is_model_ready("minilm", headers=AUTH) and client.is_model_ready("minilm", "1", headers=AUTH)
    server = client.get_server_metadata(headers=AUTH)
    assert server.name == "transformer-serving" and server.version
    metadata = client.get_model_metadata("minilm", headers=AUTH)
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [("TEXT", "BYTES", [-1, 1])]
    assert metadata.outputs[0].name == "embedding" and list(metadata.versions) == ["1"]

    result = client.infer("minilm", [_texts(TEXTS)], request_id="r-1", headers=AUTH)
    got = result.as_numpy("embedding")
    assert result.get_response().id == "r-1" and result.get_response().model_name == "minilm"
    http = httpclient.InferenceServerClient(keyed_gateway.url.removeprefix("http://"))
    tensor = httpclient.InferInput("TEXT", [len(TEXTS), 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[t.encode()] for t in TEXTS], dtype=object))
    # a copy: the HTTP client adds its own headers to the dict it is given
    over_http = http.infer("minilm", [tensor], headers=dict(AUTH)).as_numpy("embedding")
    assert got.shape == over_http.shape == reference(tiny_model, TEXTS).shape
    assert np.array_equal(got, over_http)
    assert np.abs(got - reference(tiny_model, TEXTS)).max() <= 1e-5


def test_tritonclient_grpc_aio_calls_it_too(keyed_gateway, tiny_model):
    async def call() -> np.ndarray:
        async with grpcaio.InferenceServerClient(keyed_gateway.grpc_address) as client:
            assert await client.is_server_ready(headers=AUTH)
            results = await asyncio.gather(
                *(client.infer("minilm", [_texts([text], grpcaio)], headers=AUTH) for text in TEXTS)
            )
            return np.concatenate([result.as_numpy("embedding") for result in results])

    assert np.abs(asyncio.run(call()) - reference(tiny_model, TEXTS)).max() <= 1e-5


def _refusal(call) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as raised:
        call()
    return raised.value


def test_refusals_carry_the_grpc_status_and_the_http_edge_message(keyed_gateway):
    client = grpcclient.InferenceServerClient(keyed_gateway.grpc_address)
    unknown = _refusal(lambda: client.infer("nope", [_texts(["a"])], headers=AUTH))
    assert unknown.status() == "StatusCode.NOT_FOUND" and "this server serves 'minilm'" in unknown.message()
    assert _refusal(lambda: client.get_model_metadata("nope", headers=AUTH)).status() == "StatusCode.NOT_FOUND"

    wrong_name = grpcclient.InferInput("X", [1, 1], "BYTES")
    wrong_name.set_data_from_numpy(np.array([[b"a"]], dtype=object))
    bad = _refusal(lambda: client.infer("minilm", [wrong_name], headers=AUTH))
    assert bad.status() == "StatusCode.INVALID_ARGUMENT" and "inputs.0.name" in bad.message()
    too_few = grpcclient.InferInput("TEXT", [2, 1], "BYTES")
    too_few.set_data_from_numpy(np.array([[b"a"], [b"b"]], dtype=object))
    too_few._get_tensor().shape[:] = [3, 1]  # the shape says 3 texts, the raw contents hold 2
    short = _refusal(lambda: client.infer("minilm", [too_few], headers=AUTH))
    assert short.status() == "StatusCode.INVALID_ARGUMENT" and "holds 2" in short.message()
    wrong_output = grpcclient.InferRequestedOutput("logits")
    named = _refusal(lambda: client.infer("minilm", [_texts(["a"])], outputs=[wrong_output], headers=AUTH))
    assert named.status() == "StatusCode.INVALID_ARGUMENT" and "outputs.0.name" in named.message()

    huge = _refusal(lambda: client.infer("minilm", [_texts(["a" * (2 << 20)])], headers=AUTH))  # > max_body_bytes
    assert huge.status() == "StatusCode.RESOURCE_EXHAUSTED"

    keyless = _refusal(lambda: client.infer("minilm", [_texts(["a"])]))
    assert keyless.status() == "StatusCode.UNAUTHENTICATED" and "authorization: Bearer" in keyless.message()
    wrong_key = _refusal(lambda: client.is_server_ready(headers={"authorization": "Bearer other"}))
    assert wrong_key.status() == "StatusCode.UNAUTHENTICATED"
    assert client.infer("minilm", [_texts(["still serving"])], headers=AUTH).as_numpy("embedding").shape[0] == 1


def test_grpc_calls_are_counted_with_the_http_ones(keyed_gateway):
    client = grpcclient.InferenceServerClient(keyed_gateway.grpc_address)
    client.infer("minilm", [_texts(["count me"])], headers=AUTH)
    _refusal(lambda: client.infer("nope", [_texts(["a"])], headers=AUTH))
    route = "/inference.GRPCInferenceService/ModelInfer"
    series = [f'serving_requests_total{{code="{code}",route="{route}"}}' for code in (200, 404)]
    with keyed_gateway.client() as http:
        for _ in range(50):  # a worker's tally is flushed to the metrics files every INTERVAL seconds
            text = http.get("/metrics").text
            if all(line in text for line in series):
                break
            time.sleep(0.2)
    assert all(line in text for line in series), [line for line in text.splitlines() if "requests_total" in line]


def test_the_load_test_attacks_the_grpc_edge(keyed_gateway):
    """`loadtest`'s engine, closed loop for 2 s, with gRPC targets carrying the API key as metadata: every call
    answered OK, recorded as 200 with the embedding's bytes."""
    from dataclasses import replace

    from loadtest.engine import closed_run
    from loadtest.targets import build_targets

    targets = build_targets(f"grpc://{keyed_gateway.grpc_address}", "grpc", list(TEXTS), endpoint="minilm")
    results, stats = closed_run([replace(t, headers=dict(AUTH)) for t in targets], seconds=2, concurrency=4)
    assert len(results) == stats.sent > 0
    assert {r.code for r in results} == {200}, {r.error for r in results}
    assert all(r.bytes_in > 0 and not r.error for r in results)


def test_every_worker_listens_on_the_grpc_port(keyed_gateway):
    """SO_REUSEPORT: each of the gateway's two workers binds the port, and the kernel spreads connections over them."""
    if shutil.which("ss") is None:
        pytest.skip("needs ss (iproute2) to list the listening sockets")
    port = keyed_gateway.grpc_address.rsplit(":", 1)[1]
    listing = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    listening = {int(pid) for pid in re.findall(r"pid=(\d+)", listing)}
    assert listening == worker_pids(keyed_gateway.pid) and len(listening) == 2, listing

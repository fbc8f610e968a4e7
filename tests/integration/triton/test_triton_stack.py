"""STACK=triton: the real tritonserver (nvidia-pytriton wheel) serving the tokenizer + encoder ensemble."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from services.common.contract import MANIFEST_FILE, MODEL_FILE, TOKENIZER_FILE
from services.modelbuild.export import VALIDATION_TEXTS
from services.triton.control_key import GRPC_HEADER, HEADER, KEY_FILE, read_control_key
from services.triton.repository import RenderOptions
from tests.support.models import reference_outputs
from tests.support.servers import processes_mentioning, start_triton, triton_metric

# Three texts and one over the tiny model's 64 tokens; PyTorch's outputs for them were recorded at export.
TEXTS = [*VALIDATION_TEXTS[:3], VALIDATION_TEXTS[-1]]


def infer_json(url: str, texts: list[str], model: str = "ensemble") -> httpx.Response:
    body = {"inputs": [{"name": "TEXT", "shape": [len(texts), 1], "datatype": "BYTES", "data": texts}]}
    return httpx.post(f"{url}/v2/models/{model}/infer", json=body, timeout=30)


@pytest.fixture(scope="module")
def triton_on(tmp_path_factory, tiny_model):
    server = start_triton(
        tmp_path_factory.mktemp("triton-on"), tiny_model, RenderOptions(batching=True, max_queue_delay_us=20000)
    )
    yield server
    server.stop()


def test_ensemble_answers_what_pytorch_answered(triton_on, tiny_model):
    response = infer_json(triton_on.http_url, TEXTS)
    assert response.status_code == 200, response.text
    output = response.json()["outputs"][0]
    assert output["name"] == "embedding" and output["shape"] == [4, 32]
    triton_vectors = np.array(output["data"]).reshape(4, 32)
    assert np.abs(triton_vectors - reference_outputs(tiny_model, TEXTS)).max() <= 1e-5


def test_grpc_client_gets_the_same_answer(triton_on):
    client = grpcclient.InferenceServerClient(triton_on.grpc_url)
    tensor = grpcclient.InferInput("TEXT", [2, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[t.encode()] for t in TEXTS[:2]], dtype=np.object_))
    result = client.infer("ensemble", [tensor]).as_numpy("embedding")
    expected = np.array(infer_json(triton_on.http_url, TEXTS[:2]).json()["outputs"][0]["data"]).reshape(2, 32)
    np.testing.assert_allclose(result, expected, atol=1e-6)


def test_dynamic_batching_forms_batches_under_concurrency(triton_on):
    before_count = triton_metric(triton_on, "nv_inference_count", "encoder")
    before_exec = triton_metric(triton_on, "nv_inference_exec_count", "encoder")
    with ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(lambda i: infer_json(triton_on.http_url, [TEXTS[i % 4]]).status_code, range(64)))
    assert codes == [200] * 64
    count = triton_metric(triton_on, "nv_inference_count", "encoder") - before_count
    executions = triton_metric(triton_on, "nv_inference_exec_count", "encoder") - before_exec
    assert count == 64
    assert executions < count, "requests of different lengths were batched together (ragged batching)"


@pytest.mark.parametrize(
    "model, body, says",
    [
        ("ensemble", {"inputs": [{"name": "WRONG", "shape": [1, 1], "datatype": "BYTES", "data": ["a"]}]}, "WRONG"),
        (
            "encoder",
            {
                "inputs": [
                    {"name": n, "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}
                    for n in ("input_ids", "attention_mask", "token_type_ids")
                ]
            },
            "FP32",
        ),
        (
            "encoder",
            {
                "inputs": [
                    {"name": n, "shape": [3], "datatype": "INT64", "data": [1, 2, 3]}
                    for n in ("input_ids", "attention_mask", "token_type_ids")
                ]
            },
            "shape",
        ),
    ],
)
def test_wrong_inputs_get_a_400_class_error_and_the_server_keeps_serving(triton_on, model, body, says):
    response = httpx.post(f"{triton_on.http_url}/v2/models/{model}/infer", json=body, timeout=30)
    assert 400 <= response.status_code < 500, response.text
    assert says in response.json()["error"]
    assert infer_json(triton_on.http_url, ["still serving"]).status_code == 200


def test_text_that_is_not_utf8_fails_only_its_own_request(triton_on):
    client = grpcclient.InferenceServerClient(triton_on.grpc_url)
    tensor = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[b"caf\xe9"]], dtype=np.object_))
    with pytest.raises(InferenceServerException) as info:
        client.infer("ensemble", [tensor])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "UTF-8" in info.value.message()
    assert infer_json(triton_on.http_url, ["still serving"]).status_code == 200


def test_batching_off_runs_every_request_alone(tmp_path, tiny_model):
    server = start_triton(tmp_path, tiny_model, RenderOptions(batching=False))
    try:
        with ThreadPoolExecutor(16) as pool:
            codes = list(pool.map(lambda i: infer_json(server.http_url, [TEXTS[i % 4]]).status_code, range(48)))
        assert codes == [200] * 48
        assert (
            triton_metric(server, "nv_inference_exec_count", "encoder")
            == triton_metric(server, "nv_inference_count", "encoder")
            == 48
        )
    finally:
        server.stop()
    assert processes_mentioning(str(tmp_path)) == [], "tritonserver or a Python stub outlived the stop"


def test_a_full_queue_is_rejected_not_queued_forever(tmp_path, tiny_model):
    # A one-request queue and a batcher that waits up to a second to fill a batch: a burst must overflow it.
    options = RenderOptions(batching=True, max_queue_size=1, max_queue_delay_us=1_000_000)
    server = start_triton(tmp_path, tiny_model, options)
    try:
        with ThreadPoolExecutor(32) as pool:
            responses = list(pool.map(lambda i: infer_json(server.http_url, ["burst"]), range(32)))
        codes = [r.status_code for r in responses]
        assert set(codes) <= {200, 503}, codes
        rejected = [r for r in responses if r.status_code == 503]
        assert rejected and "queue" in rejected[0].json()["error"].lower()
        client = grpcclient.InferenceServerClient(server.grpc_url)
        tensor = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[b"burst"]], dtype=np.object_))
        errors = []

        def grpc_call(_):
            try:
                client.infer("ensemble", [tensor])
            except InferenceServerException as exc:
                errors.append(exc.status())

        with ThreadPoolExecutor(32) as pool:
            list(pool.map(grpc_call, range(32)))
        assert errors and set(errors) == {"StatusCode.UNAVAILABLE"}
        assert infer_json(server.http_url, ["after the burst"]).status_code == 200
    finally:
        server.stop()


def test_a_model_that_fails_to_load_gets_a_readable_reason(tmp_path, tiny_model):
    from services.common.errors import ConfigurationError

    broken = tmp_path / "broken-model"
    broken.mkdir()
    for name in (MANIFEST_FILE, TOKENIZER_FILE):
        (broken / name).write_bytes((tiny_model / name).read_bytes())
    (broken / MODEL_FILE).write_bytes(b"this is not an onnx file")
    with pytest.raises(ConfigurationError) as info:
        start_triton(tmp_path / "run", broken, RenderOptions(), models=("encoder",))
    message = str(info.value)
    assert "model 'encoder' failed to load" in message and "Protobuf parsing failed" in message, message
    assert "_create_inference_session" not in message, "the Python stack is left in the log file"
    assert processes_mentioning(str(tmp_path)) == []


def test_model_control_is_refused_to_a_client_without_the_control_key(triton_on):
    """Anyone who reaches Triton's ports may infer; only the holder of the run directory's key may load, unload or
    list models, register shared memory, or change tracing and logging (over HTTP and gRPC)."""
    run_dir = triton_on.launcher.run_dir
    key = read_control_key(run_dir / KEY_FILE)
    assert oct((run_dir / KEY_FILE).stat().st_mode & 0o777) == "0o600"
    unload = httpx.post(f"{triton_on.http_url}/v2/repository/models/encoder/unload", timeout=10)
    assert unload.status_code == 403 and HEADER in unload.text, unload.text
    wrong = {HEADER: "not-the-key"}
    assert httpx.post(f"{triton_on.http_url}/v2/repository/index", headers=wrong, timeout=10).status_code == 403
    client = grpcclient.InferenceServerClient(triton_on.grpc_url)
    with pytest.raises(InferenceServerException, match="restricted|header"):
        client.unload_model("encoder")
    # a shared-memory region registered by anyone made Triton write outputs into another process's memory (SIGABRT)
    region = {"key": "/not-ours", "offset": 0, "byte_size": 1024}
    register = httpx.post(f"{triton_on.http_url}/v2/systemsharedmemory/region/r/register", json=region, timeout=10)
    assert register.status_code == 403 and HEADER in register.text, register.text
    with pytest.raises(InferenceServerException, match="restricted|header"):
        client.register_system_shared_memory("r", "/not-ours", 1024)
    for path in ("/v2/logging", "/v2/trace/setting"):
        assert httpx.post(f"{triton_on.http_url}{path}", json={}, timeout=10).status_code == 403, path
    assert httpx.get(f"{triton_on.http_url}/v2/models/encoder/ready", timeout=5).status_code == 200
    assert infer_json(triton_on.http_url, TEXTS[:1]).status_code == 200, "inference stays open"
    index = client.get_model_repository_index(headers={GRPC_HEADER: key}, as_json=True)["models"]
    assert {m["name"] for m in index} >= {"encoder", "ensemble", "tokenizer"}
    client.close()

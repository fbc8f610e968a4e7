"""The clearml-serving wire contract, with preprocess files written the way clearml-serving users write them,
served by a real gateway over real HTTP."""

from __future__ import annotations

import gzip
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from services.gateway.endpoints import EndpointConfig, EndpointsFile, TensorSpec
from services.triton.repository import RenderOptions
from tests.support.servers import start_gateway, start_triton, triton_metric

CODE = Path(__file__).parent / "clearml_preprocess"
"""The preprocess files, one per endpoint (its name): clearml-serving users' code, as they write it."""

PACKAGE_INIT = """
from .helpers import double


class Preprocess:
    def process(self, data, state, collect_custom_statistics_fn=None):
        return {"y": double(data["x"])}

    def unload(self):
        with open(UNLOADED, "a") as handle:
            handle.write("unloaded\\n")
"""


ENCODER_TENSORS = {
    "inputs": [
        TensorSpec(name=n, dtype="INT64", shape=[-1, -1]) for n in ("input_ids", "attention_mask", "token_type_ids")
    ],
    "outputs": [TensorSpec(name="embedding", dtype="FP32", shape=[-1, 32])],
}


def sklearn_model(path) -> None:
    """y = 2x + 1, fitted by scikit-learn and saved with joblib, as clearml-serving's sklearn examples save theirs."""
    import joblib
    from sklearn.linear_model import LinearRegression

    x = np.array([[0.0], [1.0], [2.0], [3.0]])
    joblib.dump(LinearRegression().fit(x, 2 * x[:, 0] + 1), path)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, tiny_model):
    """One gateway worker for every test: sync send_request from a sync method, and async calls fanned out to the
    same worker, must not deadlock it."""
    base = tmp_path_factory.mktemp("contract")
    triton = start_triton(base / "triton", tiny_model, RenderOptions(batching=True), models=("encoder",))
    run_dir = base / "gateway"
    run_dir.mkdir()
    package = base / "package"
    package.mkdir()
    (package / "__init__.py").write_text(PACKAGE_INIT.replace("UNLOADED", repr(str(base / "unloaded.txt"))))
    (package / "helpers.py").write_text("def double(x):\n    return 2 * x\n")
    sklearn_model(base / "model.joblib")
    engines = {
        "fanout": "custom_async",
        "regression": "sklearn",
        "triton_template": "triton",
        "triton_override": "triton",
    }
    endpoints = {}
    for name in sorted(path.stem for path in CODE.glob("*.py")):
        engine = engines.get(name, "custom")
        config = {"model": "m", "version": "2"} if engine == "custom" else {}
        if engine == "triton":
            config = {"model": "encoder", **ENCODER_TENSORS}
        if engine == "sklearn":
            config = {"model_file": str(base / "model.joblib")}
        endpoints[name] = EndpointConfig(engine=engine, preprocess=str(CODE / f"{name}.py"), **config)
    endpoints["package"] = EndpointConfig(engine="custom", preprocess=str(package))
    EndpointsFile(endpoints=endpoints).write(run_dir / "endpoints.json")
    env = {"GATEWAY_ENDPOINTS_RETIRE_AFTER": "1"}
    server = start_gateway(run_dir, tiny_model, triton, workers=1, env=env)
    server.base, server.triton = base, triton
    yield server
    server.launcher.stop_all()
    triton.stop()


JSON_BODY = b'{"a": 1}'


@pytest.mark.parametrize(
    ("content_type", "body", "kind"),
    [
        ("application/json", JSON_BODY, "dict"),
        ("Application/JSON; charset=utf-8", JSON_BODY, "dict"),
        ("application/vnd.api+json", JSON_BODY, "dict"),
        (None, JSON_BODY, "dict"),
        ("application/x-www-form-urlencoded", JSON_BODY, "bytes"),  # curl -d's default: bytes, as FastAPI gives them
        ("text/plain", JSON_BODY, "bytes"),
        ("application/x-ndjson", JSON_BODY, "bytes"),
        ("image/png", b"\x89PNG\x00\x01", "bytes"),
    ],
)
def test_the_body_reaches_preprocess_parsed_for_json_types_and_none_else_as_bytes(gateway, content_type, body, kind):
    headers = {"content-type": content_type} if content_type else {}
    with gateway.client() as client:
        response = client.post("/serve/bytes", content=body, headers=headers)
    assert response.json() == {"kind": kind, "size": 1 if kind == "dict" else len(body)}


def test_a_body_without_content_type_that_is_not_json_is_a_400_saying_what_to_send(gateway):
    with gateway.client() as client:
        untyped = client.post("/serve/bytes", content=b"\x89PNG\x00\x01")
        form = client.post(
            "/serve/stages", content=JSON_BODY, headers={"content-type": "application/x-www-form-urlencoded"}
        )
    assert untyped.status_code == 400
    assert "without a Content-Type is read as JSON" in untyped.json()["error"]["message"]
    assert "application/octet-stream" in untyped.json()["error"]["message"]
    assert form.status_code == 422, "the user's code got bytes and failed on them: a hint says how to send JSON"
    assert "-H 'Content-Type: application/json'" in form.json()["error"]["message"]


def test_gzip_bodies_and_a_trailing_slash(gateway):
    with gateway.client() as client:
        packed = client.post(
            "/serve/bytes/",
            content=gzip.compress(json.dumps({"a": 1, "b": 2}).encode()),
            headers={"content-type": "application/json", "content-encoding": "gzip"},
        )
        bomb = client.post(
            "/serve/bytes",
            content=gzip.compress(b"0" * 5_000_000),
            headers={"content-type": "application/octet-stream", "content-encoding": "gzip"},
        )
    assert packed.status_code == 200 and packed.json() == {"kind": "dict", "size": 2}
    assert bomb.status_code == 413 and "decompresses to more than" in bomb.json()["error"]["message"]


@pytest.mark.parametrize("stage", ["preprocess", "process", "postprocess"])
def test_an_exception_in_user_code_is_a_422_naming_the_stage_and_the_request(gateway, stage):
    with gateway.client() as client:
        response = client.post("/serve/stages", json={"fail": stage})
    assert response.status_code == 422
    error = response.json()["error"]
    assert f"{stage} of endpoint 'stages'" in error["message"] or f"{stage}" in error["param"]
    assert error["request_id"] == response.headers["x-request-id"]


def test_what_orjson_cannot_serialise_as_is_is_serialised(gateway):
    with gateway.client() as client:
        body = client.post("/serve/stages/2", json={}).json()
    assert body == {
        "scalar": 1.5,
        "count": 3,
        "7": "int key",
        "column": [1.0, 4.0],
        "endpoint": ["custom", "stages", "m", "2"],
    }


def test_pipelines_of_endpoints_with_async_and_sync_send_request(gateway):
    with gateway.client() as client:
        assert client.post("/serve/pipeline", json={"x": 5}).json() == {"from_stages": 3, "x": 5}
        assert client.post("/serve/sync_pipeline", json={}).json() == {"via_sync": 1.5}


def test_a_package_folder_serves_and_its_edit_reloads_it_and_unload_runs(gateway):
    package = gateway.base / "package"
    with gateway.client() as client:
        assert client.post("/serve/package", json={"x": 2}).json() == {"y": 4}
        (package / "helpers.py").write_text("def double(x):\n    return 20 * x\n")
        deadline = time.monotonic() + 15
        while client.post("/serve/package", json={"x": 2}).json() != {"y": 40}:
            assert time.monotonic() < deadline, "the edit was not picked up"
            time.sleep(0.2)
    deadline = time.monotonic() + 60  # the replaced instances are unloaded once their requests had time to finish
    while not (gateway.base / "unloaded.txt").exists():
        assert time.monotonic() < deadline, "unload() of the replaced Preprocess never ran"
        time.sleep(0.5)


def test_each_request_gets_a_fresh_state_and_the_worker_keeps_one_instance(gateway):
    with gateway.client() as client:
        answers = [client.post("/serve/order", json={"n": n}).json() for n in (1, 2)]
    for answer in answers:
        assert answer["order"] == ["preprocess", "process", "postprocess"]
        assert answer["state_at_preprocess"] == [], "state is a new dict for every request"
    assert answers[1]["requests"] == answers[0]["requests"] + 1, "one Preprocess instance per endpoint and worker"


def test_the_triton_engine_calls_an_async_process_override_but_not_the_templates_sync_process(gateway):
    before = triton_metric(gateway.triton, "nv_inference_count", "encoder")
    with gateway.client() as client:
        override = client.post("/serve/triton_override", json={"a": 1})
        template = client.post("/serve/triton_template", json={"ids": [1, 2, 3]})
    assert override.json() == {"override": {"a": 1}}, "an async process replaces the call to Triton"
    assert template.json() == {"shape": [1, 32], "process_called": False}, "a sync process is not called"
    deadline = time.monotonic() + 10
    while (count := triton_metric(gateway.triton, "nv_inference_count", "encoder")) < before + 1:
        assert time.monotonic() < deadline, "Triton never counted the template's inference"
        time.sleep(0.1)
    assert count == before + 1, "only the template's request reached Triton"


def test_a_model_engine_predicts_with_its_model_file_and_never_calls_process(gateway):
    with gateway.client() as client:
        response = client.post("/serve/regression", json={"x": 10.0})
    assert response.status_code == 200, response.text
    assert response.json() == {"y": [pytest.approx(21.0)]}


def test_custom_async_send_requests_run_at_once_and_the_worker_keeps_answering(gateway, tmp_path):
    """`fanout` sends two requests to `gate` before awaiting either; `gate` holds each until the test releases it.
    Both are in flight at once on the one worker, whose /health/live answers meanwhile."""
    answers: list = []
    with gateway.client() as client:
        waiting = threading.Thread(
            target=lambda: answers.append(client.post("/serve/fanout", json={"dir": str(tmp_path)}))
        )
        waiting.start()
        try:
            deadline = time.monotonic() + 20
            while not all((tmp_path / f"started-{i}").exists() for i in (1, 2)):
                assert time.monotonic() < deadline, "the two calls were never in flight together"
                time.sleep(0.05)
            with gateway.client() as other:
                assert other.get("/health/live").status_code == 200
            assert waiting.is_alive(), "the pipeline is still waiting while the worker answers"
        finally:
            (tmp_path / "release").touch()
            waiting.join(30)
    first, second = answers[0].json()["answers"]
    assert (first["i"], second["i"]) == (1, 2)
    assert max(first["start"], second["start"]) < min(first["end"], second["end"]), "their server-side times overlap"

"""The clearml-serving wire contract, with preprocess files written the way clearml-serving users write them,
served by a real gateway over real HTTP."""

from __future__ import annotations

import gzip
import json
import time

import pytest

from services.gateway.endpoints import EndpointConfig, EndpointsFile
from services.triton.repository import RenderOptions
from tests.support.servers import start_gateway, start_triton

BYTES = """
class Preprocess(object):
    def preprocess(self, body, state, collect_custom_statistics_fn=None):
        return {"kind": type(body).__name__, "size": len(body)}

    def process(self, data, state, collect_custom_statistics_fn=None):
        return data
"""

STAGES = """
import numpy as np


class Preprocess:
    def preprocess(self, body, state, collect_custom_statistics_fn=None):
        if body.get("fail") == "preprocess":
            raise ValueError("bad input")
        return body

    def process(self, data, state, collect_custom_statistics_fn=None):
        if data.get("fail") == "process":
            raise RuntimeError("model exploded")
        return data

    def postprocess(self, data, state, collect_custom_statistics_fn=None):
        if data.get("fail") == "postprocess":
            return {"broken": object()}
        matrix = np.arange(6, dtype=np.float32).reshape(2, 3)
        return {"scalar": np.float32(1.5), "count": np.int64(3), 7: "int key", "column": matrix[:, 1],
                "endpoint": [self.model_endpoint.engine_type, self.model_endpoint.serving_url,
                             self.model_endpoint.model_id, self.model_endpoint.version]}
"""

PIPELINE = """
class Preprocess:
    async def preprocess(self, body, state, collect_custom_statistics_fn=None):
        return body

    async def process(self, data, state, collect_custom_statistics_fn=None):
        first = await self.async_send_request("stages", data={"x": 1})
        return {"from_stages": first["count"], "x": data["x"]}


"""

SYNC_PIPELINE = """
class Preprocess:
    def process(self, data, state, collect_custom_statistics_fn=None):
        return {"via_sync": self.send_request("stages", version=None, data={})["scalar"]}
"""

PACKAGE_INIT = """
from .helpers import double


class Preprocess:
    def process(self, data, state, collect_custom_statistics_fn=None):
        return {"y": double(data["x"])}

    def unload(self):
        with open(UNLOADED, "a") as handle:
            handle.write("unloaded\\n")
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, tiny_model):
    base = tmp_path_factory.mktemp("contract")
    triton = start_triton(base / "triton", tiny_model, RenderOptions(batching=True), models=("encoder",))
    run_dir = base / "gateway"
    run_dir.mkdir()
    for name, source in (
        ("bytes", BYTES),
        ("stages", STAGES),
        ("pipeline", PIPELINE),
        ("sync_pipeline", SYNC_PIPELINE),
    ):
        (base / f"{name}.py").write_text(source)
    package = base / "package"
    package.mkdir()
    (package / "__init__.py").write_text(PACKAGE_INIT.replace("UNLOADED", repr(str(base / "unloaded.txt"))))
    (package / "helpers.py").write_text("def double(x):\n    return 2 * x\n")
    endpoints = {
        name: EndpointConfig(engine="custom", preprocess=str(base / f"{name}.py"), model="m", version="2")
        for name in ("bytes", "stages", "pipeline", "sync_pipeline")
    }
    endpoints["package"] = EndpointConfig(engine="custom", preprocess=str(package))
    EndpointsFile(endpoints=endpoints).write(run_dir / "endpoints.json")
    server = start_gateway(run_dir, tiny_model, triton, env={"GATEWAY_ENDPOINTS_RETIRE_AFTER": "1"})
    server.base = base
    yield server
    server.launcher.stop_all()
    triton.stop()


def test_bodies_that_are_not_json_reach_preprocess_as_bytes(gateway):
    with gateway.client() as client:
        raw = client.post("/serve/bytes", content=b"\x89PNG\x00\x01", headers={"content-type": "image/png"})
        as_json = client.post("/serve/bytes", json={"a": 1})
    assert raw.json() == {"kind": "bytes", "size": 6}
    assert as_json.json() == {"kind": "dict", "size": 1}


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

"""Configured endpoints: each entry of the endpoint file loaded on its own, and run step by step as a pipeline."""

import asyncio

import pytest

from services.api.endpoint import Endpoints, PipelineEndpoint
from services.common.errors import InvalidInput, NotFound
from services.gateway.configured import build_configured, validate_file
from services.gateway.endpoints import EndpointConfig, EndpointsFile
from services.triton.grpc_client import TritonClient
from tests.support.user_code import THREADS


def build(tmp_path, config: EndpointConfig) -> Endpoints:
    triton = TritonClient("127.0.0.1:1", timeout=1, retry_after=1)
    file = EndpointsFile(endpoints={"e": config})
    return build_configured(file, triton, "http://127.0.0.1:1/serve", tmp_path, THREADS, 60)


def test_a_custom_endpoint_needs_a_process_method_at_load_time(tmp_path):
    (tmp_path / "pre.py").write_text(
        "class Preprocess:\n    def preprocess(self, body, state, collect=None):\n        return body\n"
    )
    endpoints = build(tmp_path, EndpointConfig(engine="custom", preprocess="pre.py"))
    assert "e" not in endpoints.by_name and "has no process" in endpoints.errors["e"]


def test_relative_preprocess_paths_resolve_next_to_the_endpoint_file(tmp_path):
    (tmp_path / "pre.py").write_text(
        "class Preprocess:\n    def process(self, data, state, collect=None):\n        return data\n"
    )
    endpoints = build(tmp_path, EndpointConfig(engine="custom", preprocess="pre.py"))
    assert endpoints.by_name["e"].preprocess_code.has("process")
    assert "does not exist" in build(tmp_path, EndpointConfig(engine="custom", preprocess="missing.py")).errors["e"]


def test_one_bad_endpoint_never_takes_the_others_down(tmp_path):
    (tmp_path / "ok.py").write_text(
        "class Preprocess:\n    def process(self, data, state, collect=None):\n        return data\n"
    )
    (tmp_path / "broken.py").write_text("class Preprocess:\n    def load(self, f):\n        raise OSError('gone')\n")
    file = EndpointsFile(
        endpoints={
            "ok": EndpointConfig(engine="custom", preprocess="ok.py"),
            "ort": EndpointConfig(engine="onnxruntime", model="nowhere"),
            "broken": EndpointConfig(engine="custom", preprocess="broken.py"),
        }
    )
    triton = TritonClient("127.0.0.1:1", timeout=1, retry_after=1)
    endpoints = build_configured(file, triton, "http://127.0.0.1:1/serve", tmp_path, THREADS, 60)
    assert endpoints.names() == ["ok"]
    assert "field 'outputs' is empty" in endpoints.errors["ort"]
    assert "load() failed: gone" in endpoints.errors["broken"]


def test_a_configured_endpoint_is_a_pipeline_whose_steps_call_the_users_code(tmp_path):
    (tmp_path / "pre.py").write_text(
        "class Preprocess:\n"
        "    def preprocess(self, body, state, collect=None):\n"
        "        collect({'n': len(body['x'])})\n"
        "        state['n'] = len(body['x'])\n"
        "        return body['x']\n"
        "    async def process(self, data, state, collect=None):\n"
        "        return [v * 2 for v in data]\n"
        "    def postprocess(self, data, state, collect=None):\n"
        "        if not data:\n"
        "            raise KeyError('empty')\n"
        "        return {'y': data, 'n': state['n']}\n"
    )
    endpoint = build(tmp_path, EndpointConfig(engine="custom", preprocess="pre.py", version="2")).by_name["e"]
    assert isinstance(endpoint, PipelineEndpoint) and (endpoint.version, endpoint.stage) == ("2", "inference")
    endpoint.accept(None)
    endpoint.accept("2")
    with pytest.raises(NotFound, match="available: '2'"):
        endpoint.accept("3")

    async def run(x):
        state, collected = {}, {}
        data = await endpoint.preprocess({"x": x}, state, lambda values: collected.update(values or {}))
        data = await endpoint.process(data, state, None)
        return await endpoint.postprocess(data, state, None), collected

    assert asyncio.run(run([1, 2])) == ({"y": [2, 4], "n": 2}, {"n": 2})
    with pytest.raises(InvalidInput, match="postprocess of endpoint 'e' failed: KeyError") as failed:
        asyncio.run(run([]))
    assert failed.value.param == "postprocess"


def test_checking_a_file_unloads_every_instance_it_loaded(tmp_path):
    (tmp_path / "pre.py").write_text(
        "class Preprocess:\n"
        "    def load(self, local_file_name):\n"
        f"        open({str(tmp_path / 'log')!r}, 'a').write('load ')\n"
        "    def process(self, data, state, collect=None):\n        return data\n"
        "    def unload(self):\n"
        f"        open({str(tmp_path / 'log')!r}, 'a').write('unload')\n"
    )
    file = EndpointsFile(endpoints={"e": EndpointConfig(engine="custom", preprocess="pre.py")})
    assert validate_file(file, tmp_path, 60) == {}
    assert (tmp_path / "log").read_text() == "load unload"

from services.gateway.custom import EndpointRegistry
from services.gateway.endpoints import EndpointConfig, EndpointsFile
from services.gateway.triton_client import TritonClient


def build(tmp_path, config: EndpointConfig) -> EndpointRegistry:
    triton = TritonClient("127.0.0.1:1", timeout=1, retry_after=1)
    return EndpointRegistry.build(EndpointsFile(endpoints={"e": config}), triton, "http://127.0.0.1:1/serve", tmp_path)


def test_a_custom_endpoint_needs_a_process_method_at_load_time(tmp_path):
    (tmp_path / "pre.py").write_text(
        "class Preprocess:\n    def preprocess(self, body, state, collect=None):\n        return body\n"
    )
    registry = build(tmp_path, EndpointConfig(engine="custom", preprocess="pre.py"))
    assert registry.get("e") is None and "has no process" in registry.errors["e"]


def test_relative_preprocess_paths_resolve_next_to_the_endpoint_file(tmp_path):
    (tmp_path / "pre.py").write_text(
        "class Preprocess:\n    def process(self, data, state, collect=None):\n        return data\n"
    )
    registry = build(tmp_path, EndpointConfig(engine="custom", preprocess="pre.py"))
    assert registry.get("e").preprocess.has("process")
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
    registry = EndpointRegistry.build(file, triton, "http://127.0.0.1:1/serve", tmp_path)
    assert registry.names() == ["ok"]
    assert "field 'outputs' is empty" in registry.errors["ort"]
    assert "load() failed: gone" in registry.errors["broken"]

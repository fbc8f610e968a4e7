import pytest

from services.common.errors import ConfigurationError
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
    with pytest.raises(ConfigurationError, match="has no process"):
        build(tmp_path, EndpointConfig(engine="custom", preprocess="pre.py"))


def test_relative_preprocess_paths_resolve_next_to_the_endpoint_file(tmp_path):
    (tmp_path / "pre.py").write_text(
        "class Preprocess:\n    def process(self, data, state, collect=None):\n        return data\n"
    )
    registry = build(tmp_path, EndpointConfig(engine="custom", preprocess="pre.py"))
    assert registry.get("e").preprocess.has("process")
    with pytest.raises(ConfigurationError, match="does not exist"):
        build(tmp_path, EndpointConfig(engine="custom", preprocess="missing.py"))

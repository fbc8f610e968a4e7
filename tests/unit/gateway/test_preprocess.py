"""clearml-serving's Preprocess contract: loading the user's file and calling its methods as clearml-serving does."""

import asyncio

import pytest

from services.common.errors import ConfigurationError
from services.gateway.preprocess import UserPreprocess, load_preprocess_class

SYNC_AND_ASYNC = """
class Preprocess:
    def __init__(self):
        self.loaded = None

    def load(self, local_file_name):
        self.loaded = local_file_name
        return {"weights": local_file_name}

    def preprocess(self, body, state, collect_custom_statistics_fn=None):
        state["seen"] = body["x"]
        collect_custom_statistics_fn({"x": body["x"]})
        return body["x"] * 2

    async def postprocess(self, data, state, collect_custom_statistics_fn=None):
        return {"y": data, "seen": state["seen"], "endpoint": self.model_endpoint["name"]}
"""


def user_preprocess(tmp_path, source: str) -> UserPreprocess:
    path = tmp_path / "preprocess.py"
    path.write_text(source)
    return UserPreprocess(path, {"name": "e"}, model_file="w.bin", serving_url="http://127.0.0.1:1/serve/")


def test_methods_are_called_with_state_and_statistics_sync_or_async(tmp_path):
    pre = user_preprocess(tmp_path, SYNC_AND_ASYNC)
    assert pre.model == {"weights": "w.bin"} and pre.instance.loaded == "w.bin"
    assert pre.has("preprocess") and pre.has("postprocess") and not pre.has("process")
    collected, state = [], {}
    data = asyncio.run(pre.call("preprocess", {"x": 21}, state, collected.append))
    result = asyncio.run(pre.call("postprocess", data, state, collected.append))
    assert result == {"y": 42, "seen": 21, "endpoint": "e"}
    assert collected == [{"x": 21}]


def test_each_instance_gets_its_own_send_request_base_url(tmp_path):
    pre = user_preprocess(tmp_path, "class Preprocess:\n    pass\n")
    assert pre.serving_url == "http://127.0.0.1:1/serve"
    assert callable(pre.instance.send_request)


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("x = 1\n", "defines no class Preprocess"),
        ("import not_a_module_anywhere\n", "failed to import"),
        ("class Preprocess(:\n", "failed to import"),
    ],
)
def test_broken_files_are_refused_when_loaded(tmp_path, source, says):
    path = tmp_path / "bad.py"
    path.write_text(source)
    with pytest.raises(ConfigurationError, match=says):
        load_preprocess_class(path)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigurationError, match="does not exist"):
        load_preprocess_class(tmp_path / "nope.py")

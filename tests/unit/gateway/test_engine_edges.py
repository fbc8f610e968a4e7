"""Edges of the engines found by attacking them: a tensor engine's preprocess output that numpy cannot take is the
caller's 422 naming preprocess (it was a 500), `asyncio.create_task(self.send_request(...))` works as with
clearml-serving's coroutine, a model file without `predict` is refused when added, a model engine never gets a str
(xgboost and lightgbm read it as a path on the server), and a file no library can load is said in one line with the
formats the engine reads. Concurrent sync pipelines: tests/e2e/test_examples.py."""

import asyncio
from pathlib import Path

import joblib
import pytest

from services.common.errors import InvalidInput
from services.gateway.configured import ConfiguredEndpoint
from services.gateway.endpoints import EndpointConfig, TensorSpec
from services.gateway.preprocess import ClearMLModelEndpoint, UserPreprocess
from tests.support.user_code import THREADS
from tests.unit.gateway.test_configured import build
from tests.unit.gateway.test_engines import with_fakes

PASS_THROUGH = """
class Preprocess:
    def preprocess(self, body, state, collect_custom_statistics_fn=None):
        return body["data"]
"""


def tensor_endpoint(tmp_path, inputs: int) -> ConfiguredEndpoint:
    path = tmp_path / "pass.py"
    path.write_text(PASS_THROUGH)
    specs = [TensorSpec(name=f"x{i}", dtype="INT64", shape=[-1, -1]) for i in range(inputs)]
    config = EndpointConfig(
        engine="triton",
        model="m",
        preprocess=str(path),
        inputs=specs,
        outputs=[TensorSpec(name="y", dtype="FP32", shape=[-1])],
    )
    code = UserPreprocess(
        path, ClearMLModelEndpoint.from_config("e", config), model_file=None, serving_url="http://x", threads=THREADS
    )
    return with_fakes(config, code, [])


@pytest.mark.parametrize(
    ("inputs", "data"),
    [(3, None), (3, 7), (1, [[1e30]]), (2, [[[1e30]], [[1]]])],
    ids=["none-for-three-inputs", "a-number-for-three-inputs", "overflow", "overflow-in-a-list"],
)
def test_preprocess_output_a_tensor_engine_cannot_take_is_the_callers_422(tmp_path, inputs, data):
    """On the stack: {"data": null} to a triton endpoint with three inputs is a 500 (TypeError: 'NoneType' object is
    not iterable), [[1e30]] for an INT64 input a 500 (OverflowError)."""
    endpoint = tensor_endpoint(tmp_path, inputs)

    async def run():
        return await endpoint.process(await endpoint.preprocess({"data": data}, {}, lambda _: None), {}, lambda _: None)

    with pytest.raises(InvalidInput, match="preprocess"):
        asyncio.run(run())


CREATE_TASK = """
import asyncio


class Preprocess:
    async def process(self, data, state, collect_custom_statistics_fn=None):
        task = asyncio.create_task(self.send_request("other", data=data))  # clearml-serving: a coroutine
        task.cancel()
        return {"started": True}
"""


def test_send_request_in_async_code_can_be_wrapped_in_create_task_as_with_clearml_serving(tmp_path):
    """clearml-serving's custom_async `send_request` is an `async def`: its users write
    `asyncio.create_task(self.send_request(...))`. Here it returns a Task, which create_task refuses (TypeError: a
    coroutine was expected, got <Task ...>)."""
    path = tmp_path / "create_task.py"
    path.write_text(CREATE_TASK)
    config = EndpointConfig(engine="custom_async", preprocess=str(path))
    code = UserPreprocess(
        path, ClearMLModelEndpoint.from_config("e", config), model_file=None, serving_url="http://x", threads=THREADS
    )
    endpoint = with_fakes(config, code, [])
    assert asyncio.run(endpoint.process({}, {}, lambda _: None)) == {"started": True}


def test_a_sklearn_model_file_without_predict_is_refused_when_added(tmp_path):
    """`serving endpoints add x --engine sklearn --model-file dict.pkl` is accepted; every request is then a 422
    blaming the preprocess output ("cannot predict on the preprocess output: AttributeError: 'dict' object has no
    attribute 'predict'")."""
    joblib.dump({"not": "a model"}, tmp_path / "dict.pkl")
    built = build(tmp_path, EndpointConfig(engine="sklearn", model_file=str(tmp_path / "dict.pkl")))
    assert "predict" in built.errors.get("e", ""), built.errors


@pytest.mark.parametrize("data", ["/etc/passwd", b"rows", Path("/etc/passwd")], ids=["str", "bytes", "path"])
def test_a_model_engine_refuses_a_path_or_text_from_preprocess(tmp_path, data):
    joblib.dump(Rows(), tmp_path / "rows.pkl")
    built = build(tmp_path, EndpointConfig(engine="sklearn", model_file=str(tmp_path / "rows.pkl")))
    endpoint = built.by_name["e"]
    with pytest.raises(InvalidInput, match="preprocess of endpoint 'e' returned a") as raised:
        asyncio.run(endpoint.process(data, {}, lambda _: None))
    assert raised.value.param == "preprocess"
    assert asyncio.run(endpoint.process([[1, 2]], {}, lambda _: None)) == [2], "rows still predict"


class Rows:
    """A model: predicts each row's length."""

    def predict(self, rows):
        return [len(row) for row in rows]


@pytest.mark.parametrize("engine", ["sklearn", "xgboost", "lightgbm"])
def test_a_file_the_library_cannot_load_is_said_in_one_line_with_what_it_reads(tmp_path, engine):
    (tmp_path / "garbage.bin").write_bytes(b"not a model at all")
    built = build(tmp_path, EndpointConfig(engine=engine, model_file=str(tmp_path / "garbage.bin")))
    error = built.errors["e"]
    assert f"engine '{engine}' cannot load model file" in error and "it reads a model saved with" in error, error
    assert "\n" not in error and len(error) < 500, error

"""clearml-serving's engines, method by method: which of the user's Preprocess methods each engine calls, in which
order, with which arguments and on which side of the event loop, and what an exception in each stage becomes. The
engine's own step runs against stand-ins for Triton and ONNX Runtime here (the real ones: tests/integration)."""

import asyncio
from pathlib import Path

import numpy as np
import pytest

from services.common.errors import InvalidInput
from services.gateway import engines
from services.gateway.configured import ConfiguredEndpoint
from services.gateway.endpoints import EndpointConfig, TensorSpec
from services.gateway.engine_names import NAMES
from services.gateway.engines.onnxruntime import OnnxRuntimeEngine
from services.gateway.preprocess import ClearMLModelEndpoint, UserPreprocess
from tests.support.user_code import THREADS
from tests.unit.gateway.test_configured import build

RECORDER = """
import asyncio


def on_loop():
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False


class Model:
    def __init__(self, calls):
        self.calls = calls

    def predict(self, data):
        self.calls.append(("model.predict", data))
        if data == ["fail"]:
            raise ValueError("cannot predict that")
        return [10 * v for v in data]


class Preprocess:
    def __init__(self):
        self.calls = []

    def load(self, local_file_name):
        self.calls.append(("load", local_file_name))
        return Model(self.calls)

    {kind} preprocess(self, body, state, collect_custom_statistics_fn=None):
        self.calls.append(("preprocess", body, dict(state), collect_custom_statistics_fn, on_loop()))
        if body.get("fail") == "preprocess":
            raise KeyError("x")
        state["preprocess"] = True
        return ["fail"] if body.get("fail") == "process" else [1, 2]

    {kind} process(self, data, state, collect_custom_statistics_fn=None):
        self.calls.append(("process", data, dict(state), collect_custom_statistics_fn, on_loop()))
        if data == ["fail"]:
            raise RuntimeError("process broke")
        state["process"] = True
        return [v + 1 for v in data]

    {kind} postprocess(self, data, state, collect_custom_statistics_fn=None):
        self.calls.append(("postprocess", data, dict(state), collect_custom_statistics_fn, on_loop()))
        if state.get("fail") == "postprocess":
            raise ZeroDivisionError("postprocess broke")
        return {{"y": data}}
"""

TENSORS = {
    "inputs": [TensorSpec(name="x", dtype="INT64", shape=[-1])],
    "outputs": [TensorSpec(name="y", dtype="FP32", shape=[-1])],
}
OUTPUT = np.array([7.0, 8.0], dtype=np.float32)
MODEL_ENGINES = ("sklearn", "xgboost", "lightgbm")
ALL_ENGINES = ("triton", "onnxruntime", "custom", "custom_async", *MODEL_ENGINES)


class FakeTriton:
    """Triton's client as the triton engine calls it (the real one is exercised over HTTP in the integration tests)."""

    def __init__(self, calls: list):
        self.calls = calls

    async def infer(self, model, inputs, outputs, *, version=""):
        self.calls.append(("triton.infer", model, {name: array.tolist() for name, array in inputs.items()}, outputs))
        return {outputs[0]: OUTPUT}


class FakeOnnx:
    def __init__(self, calls: list):
        self.calls = calls

    def run(self, feeds):
        self.calls.append(("onnx.run", {name: array.tolist() for name, array in feeds.items()}))
        return OUTPUT


def endpoint(tmp_path, engine: str, kind: str = "def") -> tuple[ConfiguredEndpoint, list]:
    """The recorder as `engine` runs it; the list of calls (load's, the user's methods', the model's)."""
    path = tmp_path / f"recorder_{kind.replace(' ', '_')}.py"
    path.write_text(RECORDER.format(kind=kind))
    tensors = TENSORS if engine in ("triton", "onnxruntime") else {}
    config = EndpointConfig(engine=engine, model="m" if tensors else None, preprocess=str(path), **tensors)
    code = UserPreprocess(
        path,
        ClearMLModelEndpoint.from_config("e", config),
        model_file="model.bin",
        serving_url="http://127.0.0.1:1",
        threads=THREADS,
    )
    calls = code.instance.calls
    return with_fakes(config, code, calls), calls


def with_fakes(config: EndpointConfig, code: UserPreprocess, calls: list) -> ConfiguredEndpoint:
    """Endpoint 'e' as `build_endpoint` loads it, its step on the stand-ins (a model engine's: load()'s model)."""
    engine = engines.get(config.engine)
    loading = engines.Loading("e", config, code, "model.bin", Path("."), True, FakeTriton(calls), THREADS)
    if isinstance(engine, OnnxRuntimeEngine):
        step = engine.step(loading, FakeOnnx(calls))
    elif isinstance(engine, engines.ModelEngine):
        step = engine.step(loading, code.model)
    else:
        step = engine.load(loading)
    return ConfiguredEndpoint("e", config, code, step)


async def serve(endpoint: ConfiguredEndpoint, body, collect, state: dict | None = None):
    """The dataplane's order: preprocess, the engine's step, postprocess, one `state` for all three."""
    state = {} if state is None else state
    data = await endpoint.preprocess(body, state, collect)
    data = await endpoint.process(data, state, collect)
    return await endpoint.postprocess(data, state, collect)


def collect(values: dict) -> None:
    return None


def expected_calls(engine: str, kind: str) -> list:
    on_loop = kind == "async def"  # sync methods run on a worker thread, async ones on the event loop
    pre = ("preprocess", {"x": 1}, {}, collect, on_loop)
    process = ("process", [1, 2], {"preprocess": True}, collect, on_loop)
    # written out, not read from the engine table: custom engines always call process, triton and onnxruntime only
    # an async one, model engines never
    user_process = engine in ("custom", "custom_async") or (engine in ("triton", "onnxruntime") and on_loop)
    if user_process:
        step, after, result = [process], {"preprocess": True, "process": True}, [2, 3]
    elif engine in MODEL_ENGINES:
        step, after, result = [("model.predict", [1, 2])], {"preprocess": True}, [10, 20]
    elif engine == "triton":
        step, after, result = [("triton.infer", "m", {"x": [1, 2]}, ["y"])], {"preprocess": True}, OUTPUT
    else:
        step, after, result = [("onnx.run", {"x": [1, 2]})], {"preprocess": True}, OUTPUT
    return [("load", "model.bin"), pre, *step, ("postprocess", result, after, collect, on_loop)]


def test_every_engine_of_the_table_has_its_calls_written_out_here():
    assert set(engines.NAMES) == set(ALL_ENGINES)


def test_every_named_engine_is_registered_in_the_order_of_the_names():
    assert tuple(engines.ENGINES) == NAMES
    assert all(name == engine.name and engine.summary for name, engine in engines.ENGINES.items())


@pytest.mark.parametrize("kind", ["def", "async def"])
@pytest.mark.parametrize("engine", ALL_ENGINES)
def test_each_engine_calls_the_users_methods_in_order_with_their_arguments(tmp_path, engine, kind):
    """triton and onnxruntime call only an async `process` (an override of the model call; the sync pass-through of
    clearml-serving's template is not called); custom and custom_async always call it; the model engines never do,
    and predict with what load() returned."""
    served, calls = endpoint(tmp_path, engine, kind)
    answer = asyncio.run(serve(served, {"x": 1}, collect))
    expected = expected_calls(engine, kind)
    assert [call[0] for call in calls] == [call[0] for call in expected]
    for got, want in zip(calls, expected, strict=True):
        for got_arg, want_arg in zip(got, want, strict=True):
            if isinstance(want_arg, np.ndarray):
                assert np.array_equal(got_arg, want_arg), (got, want)
            else:
                assert got_arg == want_arg, (got, want)
    assert np.array_equal(answer["y"], expected[-1][1])


FAILURES = [
    ("custom", "preprocess", "preprocess of endpoint 'e' failed: KeyError"),
    ("custom", "process", "process of endpoint 'e' failed: RuntimeError: process broke"),
    ("custom_async", "process", "process of endpoint 'e' failed: RuntimeError: process broke"),
    ("custom_async", "postprocess", "postprocess of endpoint 'e' failed: ZeroDivisionError: postprocess broke"),
    ("sklearn", "preprocess", "preprocess of endpoint 'e' failed: KeyError"),
    ("xgboost", "process", "the xgboost model of endpoint 'e' cannot predict on the preprocess output: ValueError"),
    ("lightgbm", "postprocess", "postprocess of endpoint 'e' failed: ZeroDivisionError"),
    ("triton", "preprocess", "preprocess of endpoint 'e' failed: KeyError"),
    ("triton", "postprocess", "postprocess of endpoint 'e' failed: ZeroDivisionError"),
]


@pytest.mark.parametrize("kind", ["def", "async def"])
@pytest.mark.parametrize(("engine", "stage", "says"), [pytest.param(*f, id=f"{f[0]}-{f[1]}") for f in FAILURES])
def test_an_exception_in_a_stage_is_the_callers_422_naming_that_stage(tmp_path, engine, stage, says, kind):
    served, _ = endpoint(tmp_path, engine, kind)
    with pytest.raises(InvalidInput, match=says) as failed:
        asyncio.run(serve(served, {"x": 1, "fail": stage}, collect, {"fail": stage}))
    assert (failed.value.status_code, failed.value.param) == (422, stage)


def test_an_async_process_override_of_the_triton_engine_that_fails_is_a_422_of_process(tmp_path):
    served, calls = endpoint(tmp_path, "triton", "async def")
    with pytest.raises(InvalidInput, match="process of endpoint 'e' failed: RuntimeError") as failed:
        asyncio.run(serve(served, {"x": 1, "fail": "process"}, collect))
    assert failed.value.param == "process" and "triton.infer" not in [call[0] for call in calls]


def test_bytes_that_preprocess_cannot_read_say_how_to_send_json(tmp_path):
    served, _ = endpoint(tmp_path, "custom")
    with pytest.raises(InvalidInput, match="preprocess of endpoint 'e' failed: AttributeError.*Content-Type"):
        asyncio.run(serve(served, b'{"x": 1}', collect))


@pytest.mark.parametrize("engine", ["custom", "custom_async"])
def test_the_custom_engines_refuse_a_preprocess_without_process_when_added(tmp_path, engine):
    (tmp_path / "pre.py").write_text("class Preprocess:\n    def preprocess(self, body, state, fn):\n        pass\n")
    built = build(tmp_path, EndpointConfig(engine=engine, preprocess="pre.py"))
    assert built.by_name.get("e") is None
    assert f"endpoint 'e' is {engine} but its Preprocess has no process()" in built.errors["e"]
    built = build(tmp_path, EndpointConfig(engine=engine))
    assert f"engine '{engine}' needs field 'preprocess'" in built.errors["e"]

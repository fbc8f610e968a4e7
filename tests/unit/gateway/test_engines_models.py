"""The model engines (sklearn, xgboost, lightgbm) and where their model comes from, as in clearml-serving: what the
user's `load()` returned when it is not None, else the model file through the library's own loader (skops.io.load
or joblib.load, xgboost.Booster().load_model, lightgbm.Booster(model_file=...)); tiny models made here with the real
libraries, in each format the engine reads."""

import asyncio

import numpy as np
import pytest

from services.common.errors import ConfigurationError
from services.gateway import engines
from services.gateway.endpoints import EndpointConfig
from services.gateway.model_files import skops_io
from tests.unit.gateway.test_configured import build


def collect(values: dict) -> None:
    return None


def make_sklearn(path) -> np.ndarray:
    """y = 2x + 1, saved with skops for a .skops path, else with joblib (clearml-serving's format: it runs code)."""
    import joblib
    from sklearn.linear_model import LinearRegression

    sio = skops_io()
    x = np.array([[0.0], [1.0], [2.0], [3.0]])
    model = LinearRegression().fit(x, 2 * x[:, 0] + 1)
    if str(path).endswith(".skops"):
        sio.dump(model, path)
    else:
        joblib.dump(model, path)
    return np.array([[10.0]])


def make_xgboost(path) -> np.ndarray:
    import xgboost

    x = np.array([[0.0], [1.0], [2.0], [3.0]])
    data = xgboost.DMatrix(x, label=np.array([0.0, 0.0, 1.0, 1.0]))
    params = {"objective": "reg:squarederror", "max_depth": 1, "nthread": 1}
    xgboost.train(params, data, num_boost_round=2).save_model(str(path))
    return x


def make_lightgbm(path) -> np.ndarray:
    import lightgbm

    x = np.array([[0.0], [1.0], [2.0], [3.0]] * 5)
    params = {"objective": "regression", "min_data_in_leaf": 1, "min_data_in_bin": 1, "verbose": -1, "num_threads": 1}
    lightgbm.train(params, lightgbm.Dataset(x, label=x[:, 0]), num_boost_round=2).save_model(str(path))
    return x[:4]


MODELS = {
    ("sklearn", "model.skops"): make_sklearn,
    ("sklearn", "model.joblib"): make_sklearn,  # parity: clearml-serving's sklearn engine loads joblib files
    ("xgboost", "model.json"): make_xgboost,
    ("xgboost", "model.ubj"): make_xgboost,
    ("lightgbm", "model.txt"): make_lightgbm,
}
TO_XGBOOST = """
import xgboost


class Preprocess:
    def load(self, local_file_name):
        return None  # None: the engine loads the model file itself

    def preprocess(self, body, state, collect_custom_statistics_fn=None):
        return xgboost.DMatrix(body)
"""


@pytest.mark.parametrize(("engine", "name"), list(MODELS), ids=[f"{e}-{n}" for e, n in MODELS])
def test_a_model_engine_loads_its_model_file_with_the_librarys_own_loader(tmp_path, monkeypatch, engine, name):
    data = MODELS[engine, name](tmp_path / name)
    stepped, step = [], engines.ModelEngine.step  # the model its step closes over
    monkeypatch.setattr(
        engines.ModelEngine, "step", lambda self, at, model: stepped.append(model) or step(self, at, model)
    )
    preprocess = None
    if engine == "xgboost":  # its Booster predicts on a DMatrix only: preprocess makes one, load() returns None
        (tmp_path / "to_dmatrix.py").write_text(TO_XGBOOST)
        preprocess = "to_dmatrix.py"
    config = EndpointConfig(engine=engine, model_file=name, preprocess=preprocess)  # relative: beside the file
    built = build(tmp_path, config)
    assert built.errors == {}
    served = built.by_name.get("e")
    got = asyncio.run(served.process(asyncio.run(served.preprocess(data, {}, collect)), {}, collect))
    library_model = engines.load_model(engine, str(tmp_path / name))
    if engine == "xgboost":
        import xgboost

        data = xgboost.DMatrix(data)
    assert type(stepped[0]) is type(library_model) and np.allclose(got, library_model.predict(data))
    if engine == "sklearn":
        assert np.allclose(got, [21.0])


def test_a_model_engine_uses_what_load_returned_and_needs_no_model_file_then(tmp_path):
    make_sklearn(tmp_path / "elsewhere.joblib")
    (tmp_path / "pre.py").write_text(
        "import joblib\n\n\nclass Preprocess:\n    def load(self, local_file_name):\n"
        f"        return joblib.load({str(tmp_path / 'elsewhere.joblib')!r})\n"
    )
    served = build(tmp_path, EndpointConfig(engine="sklearn", preprocess="pre.py")).by_name.get("e")
    assert np.allclose(asyncio.run(served.process([[10.0]], {}, collect)), [21.0])


@pytest.mark.parametrize("engine", ["sklearn", "xgboost", "lightgbm"])
def test_a_model_engine_without_a_model_says_which_option_gives_one(tmp_path, engine):
    errors = build(tmp_path, EndpointConfig(engine=engine)).errors["e"]
    assert f"engine '{engine}' needs a model file (`--model-file PATH`)" in errors and "load()" in errors
    (tmp_path / "garbage.bin").write_bytes(b"not a model")
    errors = build(tmp_path, EndpointConfig(engine=engine, model_file="garbage.bin")).errors["e"]
    assert f"engine '{engine}' cannot load model file" in errors and "garbage.bin" in errors
    with pytest.raises(ConfigurationError, match="cannot load model file /nowhere/model"):
        engines.load_model(engine, "/nowhere/model")

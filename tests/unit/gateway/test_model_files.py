"""Model files that are code: the sklearn engine's pickles are recognised by their first bytes and loaded only by the
gateway (as clearml-serving loads them), never by the check `serving endpoints add` runs; a skops file is built from
skops' trusted types only, and the fix the refusal names (a Preprocess.load() that trusts the types) serves it."""

import asyncio
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from services.gateway import engines
from services.gateway.configured import validate_file
from services.gateway.endpoints import EndpointConfig, EndpointsFile
from services.gateway.model_files import skops_io
from tests.unit.gateway.test_configured import build
from tests.unit.gateway.test_model_files_cli import Touch

ROWS = [[0.0], [1.0], [2.0], [3.0]]


def test_the_check_never_loads_a_pickle_and_the_gateway_loads_it_as_clearml_serving(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "evil.pkl").write_bytes(pickle.dumps(Touch(marker)))
    config = EndpointConfig(engine="sklearn", model_file="evil.pkl")
    assert validate_file(EndpointsFile(endpoints={"e": config}), tmp_path, 60) == {}
    assert not marker.exists(), "the check unpickled the model file"
    errors = build(tmp_path, config).errors  # a gateway worker: joblib.load, as clearml-serving's sklearn engine
    assert marker.exists() and "holds a NoneType, which has no predict()" in errors["e"], errors


def test_the_check_refuses_a_file_that_is_neither_skops_nor_a_pickle_without_loading_it(tmp_path):
    (tmp_path / "model.txt").write_text("tree\nversion=v4\n")
    config = EndpointConfig(engine="sklearn", model_file="model.txt")
    error = validate_file(EndpointsFile(endpoints={"e": config}), tmp_path, 60)["e"]
    assert "neither a skops file nor a joblib or pickle file" in error and "skops.io.dump" in error, error


def test_which_files_run_code_when_loaded(tmp_path):
    import joblib
    from sklearn.linear_model import LinearRegression

    sio = skops_io()
    model = LinearRegression().fit(ROWS, [1.0, 3.0, 5.0, 7.0])
    joblib.dump(model, tmp_path / "plain.joblib")
    joblib.dump(model, tmp_path / "zlib.joblib", compress=3)
    joblib.dump(model, tmp_path / "gzip.joblib", compress=("gzip", 3))
    (tmp_path / "model.pkl").write_bytes(pickle.dumps(model))
    sio.dump(model, tmp_path / "model.skops")
    sio.dump(model, tmp_path / "skops-named.bin")
    (tmp_path / "text.txt").write_text("not a pickle")
    flagged = {path.name for path in tmp_path.iterdir() if engines.get("sklearn").runs_code(path)}
    assert flagged == {"plain.joblib", "zlib.joblib", "gzip.joblib", "model.pkl"}
    sklearn, xgboost = engines.get("sklearn"), engines.get("xgboost")
    assert not xgboost.runs_code(tmp_path / "model.pkl") and not sklearn.runs_code(tmp_path / "missing.pkl")


def forest(path: Path) -> None:
    from sklearn.ensemble import RandomForestClassifier

    sio = skops_io()
    sio.dump(RandomForestClassifier(n_estimators=3, random_state=0).fit(ROWS, [0, 0, 1, 1]), path)


TRUSTING_LOAD = """
import skops.io


class Preprocess:
    def load(self, local_file_name):
        return skops.io.load(local_file_name, trusted=["sklearn.tree._tree.Tree"])
"""


def test_a_skops_file_with_an_untrusted_type_is_refused_and_the_named_fix_serves_it(tmp_path):
    forest(tmp_path / "forest.skops")
    error = build(tmp_path, EndpointConfig(engine="sklearn", model_file="forest.skops")).errors["e"]
    assert "holds types skops does not trust (sklearn.tree._tree.Tree)" in error, error
    assert "skops.io.load(local_file_name, trusted=[...])" in error and "\n" not in error, error
    (tmp_path / "trusting.py").write_text(TRUSTING_LOAD)
    config = EndpointConfig(engine="sklearn", model_file="forest.skops", preprocess="trusting.py")
    served = build(tmp_path, config).by_name.get("e")
    assert asyncio.run(served.process([[0.0], [3.0]], {}, lambda _: None)).tolist() == [0, 1]


@pytest.mark.parametrize("name", ["model.skops", "model.zip"])
def test_a_skops_file_is_read_by_its_name_or_its_zip_header(tmp_path, name):
    from sklearn.linear_model import LinearRegression

    sio = skops_io()
    sio.dump(LinearRegression().fit(ROWS, [1.0, 3.0, 5.0, 7.0]), tmp_path / name)
    served = build(tmp_path, EndpointConfig(engine="sklearn", model_file=name)).by_name.get("e")
    assert np.allclose(asyncio.run(served.process([[10.0]], {}, lambda _: None)), [21.0])


def test_loading_a_skops_file_never_imports_torch(tmp_path):
    """skops walks every scikit-learn module at its import, and sklearn's array-api adapter for torch imports torch
    where it is installed (it is here): a serving process would carry it for nothing."""
    from sklearn.linear_model import LinearRegression

    sio = skops_io()
    sio.dump(LinearRegression().fit(ROWS, [1.0, 3.0, 5.0, 7.0]), tmp_path / "model.skops")
    code = (
        "import sys; from services.gateway import engines; "
        f"model = engines.load_model('sklearn', {str(tmp_path / 'model.skops')!r}); "
        "print(type(model).__name__, 'torch' in sys.modules, importlib.util.find_spec('torch') is not None)"
    )
    done = subprocess.run([sys.executable, "-c", "import importlib.util; " + code], capture_output=True, text=True)
    assert done.stdout.split() == ["LinearRegression", "False", "True"], done.stderr

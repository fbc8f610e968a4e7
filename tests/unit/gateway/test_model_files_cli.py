"""`serving endpoints add` as an operator runs it (a subprocess): a pickle given as the sklearn engine's model file is
never loaded in the CLI (its code would run in the operator's shell), and the CLI says once that the gateway will run
it; a skops file is loaded to check it, and one holding a type skops does not trust is refused, naming the type."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from services.gateway.endpoints import EndpointsFile
from services.gateway.model_files import skops_io
from services.launcher import free_port

SERVING = Path(sys.executable).parent / "serving"


class Touch:
    """A pickle that creates `marker` when it is loaded: what any pickle can do, with any code."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def serving(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GATEWAY_TRITON_GRPC_URL": f"127.0.0.1:{free_port()}"}
    return subprocess.run([str(SERVING), *argv], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


@pytest.mark.parametrize("name", ["evil.pkl", "evil.joblib", "model.bin"])
def test_the_cli_never_loads_a_pickle_and_says_the_gateway_will_run_it(tmp_path, name):
    marker = tmp_path / "ran"
    (tmp_path / name).write_bytes(pickle.dumps(Touch(marker)))
    added = serving("endpoints", "add", "evil", "--engine", "sklearn", "--model-file", name, cwd=tmp_path)
    assert not marker.exists(), "the CLI unpickled the model file: its code ran in the operator's shell"
    assert added.returncode == 0, added.stderr
    warnings = [line for line in added.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, added.stderr
    assert "runs code" in warnings[0] and name in warnings[0] and "skops" in warnings[0], warnings
    stored = EndpointsFile.read(tmp_path / "run" / "endpoints.json").endpoints["evil"].model_file
    assert stored == str(tmp_path / name), "found from the shell's directory, kept as that file"


def test_a_skops_file_with_a_type_skops_does_not_trust_is_refused_when_added(tmp_path):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    sio = skops_io()
    model = LogisticRegression().fit([[0.0], [1.0], [2.0], [3.0]], [0, 0, 1, 1])
    sio.dump(make_pipeline(FunctionTransformer(os.system), model), tmp_path / "evil.skops")  # os.system(rows)
    evil = serving("endpoints", "add", "evil", "--engine", "sklearn", "--model-file", "evil.skops", cwd=tmp_path)
    assert evil.returncode == 2 and "warning" not in evil.stderr, evil.stderr
    assert "types skops does not trust (posix.system)" in evil.stderr and "not changed" in evil.stderr, evil.stderr
    assert not (tmp_path / "run" / "endpoints.json").exists()

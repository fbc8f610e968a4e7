"""Matrix files expand into the configurations they name; every shipped matrix file loads."""

from pathlib import Path

import pytest

from loadtest.matrix import MatrixConfig, Measurement, RunSpec
from tests.support.models import ROOT


def test_every_axis_expands_in_order():
    config = MatrixConfig(
        configs=[
            {"stack": "fastapi", "workers": [1, 2]},
            {"stack": "triton", "batching": ["off", "on"], "padding": ["ragged", "bucket"]},
        ]
    )
    assert config.runs() == [
        RunSpec("fastapi", 1, True),
        RunSpec("fastapi", 2, True),
        RunSpec("triton", 1, False, "ragged"),
        RunSpec("triton", 1, False, "bucket"),
        RunSpec("triton", 1, True, "ragged"),
        RunSpec("triton", 1, True, "bucket"),
    ]
    assert [r.name for r in config.runs()[2:4]] == ["triton-w1-off", "triton-w1-off-bucket"]


@pytest.mark.parametrize("path", sorted((ROOT / "loadtest" / "matrices").glob("*.toml")), ids=lambda p: p.name)
def test_shipped_matrix_files_load(path: Path):
    config = MatrixConfig.load(path)
    assert config.runs()
    assert {run.stack for run in config.runs()} <= {"fastapi", "triton", "clearml", "minimal"}


def test_labels_name_what_differs():
    def label(stack, batching=True, padding="ragged"):
        return Measurement(stack, 2, batching, "saturation", None, 1, 1, 1, 1, 1, 1, 1, padding=padding).label

    assert label("fastapi") == "fastapi w2"
    assert label("triton", batching=False) == "triton w2 batching off"
    assert label("triton", padding="bucket") == "triton w2 batching on bucket"


def test_the_models_cost_at_a_fractional_batch_lies_between_its_measured_neighbours():
    from loadtest.ceiling import model_cpu_at

    measured = {"1": 5000.0, "8": 3500.0, "16": 3400.0}
    assert model_cpu_at(measured, 8) == 3500.0
    assert 3400.0 < model_cpu_at(measured, 10.8) < 3500.0
    assert model_cpu_at(measured, 4) == pytest.approx(4000.0), "log scale: 4 is two thirds of the way from 1 to 8"
    assert model_cpu_at(measured, 40) is None and model_cpu_at({}, 3) is None


def test_the_references_of_a_run_average_and_keep_their_first_and_last():
    from loadtest.matrix import reference_summary

    slow = {"rate": 400.0, "batch": 64, "cpu_us_per_sequence": {"1": 6000.0, "16": 4000.0}}
    fast = {"rate": 600.0, "batch": 64, "cpu_us_per_sequence": {"1": 4000.0, "16": 3000.0}}
    found = reference_summary([slow, fast, fast])
    assert found["start"] == 400.0 and found["end"] == 600.0
    assert found["rate"] == pytest.approx(1600 / 3)
    assert found["cpu_us_per_sequence"] == {"1": pytest.approx(14000 / 3), "16": pytest.approx(10000 / 3)}

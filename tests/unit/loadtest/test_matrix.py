"""Matrix files expand into the configurations they name; every shipped matrix file loads; the rounds of a run
come together as medians, the ceiling's references as one, each round's model cost from its own references."""

from dataclasses import replace
from pathlib import Path

import pytest

from loadtest.matrix.config import MatrixConfig, RunSpec, settings_text
from loadtest.matrix.measure import Measurement, cpu_us_per_request, mean_batch
from loadtest.matrix.summary import aggregate, attach_model_cpu, reference_summary
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


def test_a_matrix_names_the_device_its_stacks_and_ceiling_run_on():
    config = MatrixConfig.load(ROOT / "loadtest" / "matrices" / "sim.toml")
    assert config.device_settings == {"device": "sim", "sim_fixed_us": 642.0, "sim_per_token_us": 4.25}
    assert MatrixConfig(configs=[]).device_settings["device"] == "cpu"
    with pytest.raises(ValueError, match="device must be one of cpu, cuda, sim"):
        MatrixConfig(configs=[], device="gpu")


def test_the_quick_matrix_is_one_round_of_the_three_stacks_and_the_plain_ensemble_at_their_defaults():
    quick = MatrixConfig.load(ROOT / "loadtest" / "matrices" / "quick.toml")
    assert quick.rounds == 1 and quick.search and quick.load_levels == []
    assert [(r.stack, r.workers, r.tuning) for r in quick.runs()] == [
        ("minimal", 1, ()),
        ("fastapi", 1, ()),
        ("triton", 1, ()),
        ("clearml", 1, ()),
    ]
    assert quick.bound_ms("all-MiniLM-L6-v2") == 250.0 and quick.bound_ms("tiny-bert") == 40.0
    assert replace(quick, device="sim").bound_ms("all-MiniLM-L6-v2") == 50.0
    assert replace(quick, latency_bound_ms=100.0).bound_ms("tiny-bert") == 100.0, "the file's (or option's) first"


def test_the_command_line_puts_its_device_and_bound_in_place_of_the_files(tmp_path):
    from loadtest.cli.bench import _matrix

    path = ROOT / "loadtest" / "matrices" / "quick.toml"
    assert _matrix(path, None, None) == MatrixConfig.load(path)
    changed = _matrix(path, "sim", 75.0)
    assert (changed.device, changed.latency_bound_ms, changed.configs) == ("sim", 75.0, MatrixConfig.load(path).configs)
    with pytest.raises(ValueError, match="device must be one of"):
        _matrix(path, "gpu", None)
    with pytest.raises(ValueError, match="latency_bound_ms must be > 0"):
        MatrixConfig(configs=[], latency_bound_ms=0)


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
    slow = {"rate": 400.0, "batch": 64, "cpu_us_per_sequence": {"1": 6000.0, "16": 4000.0}}
    fast = {"rate": 600.0, "batch": 64, "cpu_us_per_sequence": {"1": 4000.0, "16": 3000.0}}
    found = reference_summary([slow, fast, fast])
    assert found["start"] == 400.0 and found["end"] == 600.0
    assert found["rate"] == pytest.approx(1600 / 3)
    assert found["cpu_us_per_sequence"] == {"1": pytest.approx(14000 / 3), "16": pytest.approx(10000 / 3)}


def saturation(stack="triton", throughput=100.0, round_no=1, **fields) -> Measurement:
    return Measurement(
        stack, 1, True, "saturation", None, throughput, 1.0, 10, 20, 30, 40, 100, round=round_no, **fields
    )


def test_tuned_entries_and_trace_axes_name_their_configurations():
    config = MatrixConfig(
        configs=[
            {"stack": "clearml", "tuning": {"preferred_batch_sizes": [4, 8], "workers": 2}},
            {"stack": "fastapi", "trace": [0.0, 0.01]},
        ]
    )
    tuned, untraced, traced = config.runs()
    assert tuned.tuning == (("preferred_batch_sizes", (4, 8)), ("workers", 2)), "lists frozen: the spec is hashable"
    assert tuned.tuning_settings() == {"preferred_batch_sizes": [4, 8], "workers": 2}
    assert tuned.name == "clearml-w1-on-tuned" and hash(tuned)
    assert settings_text(tuned.tuning) == "preferred_batch_sizes=[4, 8], workers=2" and settings_text(()) == "defaults"
    assert (untraced.tracing, traced.tracing) == ("no tracing", "trace 1%")
    assert traced.name == "fastapi-w1-on-trace0.01"


def test_triton_s_mean_batch_between_two_readings():
    assert mean_batch((100.0, 10.0), (420.0, 50.0)) == 8.0
    assert mean_batch(None, None) == 1.0, "no Triton: in-process ONNX Runtime runs one request a call"
    assert mean_batch((100.0, 10.0), (100.0, 10.0)) is None, "Triton executed nothing in between"


def test_cpu_per_request_of_the_stack_and_of_its_front():
    assert cpu_us_per_request((1.0, 0.5), (3.0, 1.0), served=1000) == pytest.approx((2000.0, 500.0))
    assert cpu_us_per_request((1.0, 0.5), (3.0, 1.0), served=0) == (None, None)


def test_rounds_come_together_as_medians_with_the_throughput_s_min_max():
    rows = [
        saturation("triton", 90.0, 1, cpu_us_per_request=900.0),
        saturation("fastapi", 50.0, 1),
        saturation("triton", 110.0, 2, cpu_us_per_request=None),
        saturation("triton", 100.0, 3, cpu_us_per_request=1100.0),
    ]
    triton, fastapi = aggregate(rows)
    assert (triton.label, triton.rounds, triton.throughput, triton.low, triton.high) == (
        "triton w1 batching on",
        3,
        100.0,
        90.0,
        110.0,
    )
    assert triton.cpu_us_per_request == 1000.0, "the median of the rounds that measured it"
    assert triton.spread == pytest.approx(0.2)
    assert fastapi.rounds == 1 and fastapi.spread == 0.0 and fastapi.cpu_us_per_request is None


def test_each_round_is_judged_against_the_references_around_it():
    references = [{"rate": r, "batch": 8, "cpu_us_per_sequence": {"1": c, "8": c}} for r, c in ((1, 100.0), (1, 300.0))]
    references.append({"rate": 1, "batch": 8, "cpu_us_per_sequence": {"1": 500.0, "8": 500.0}})
    first, second = saturation(round_no=1, batch_size=8.0), saturation(round_no=2, batch_size=8.0)
    unbatched = saturation(round_no=2, batch_size=None)
    attach_model_cpu([first, second, unbatched], references, rounds=2)
    assert (first.model_cpu_us_per_sequence, second.model_cpu_us_per_sequence) == (200.0, 400.0)
    assert unbatched.model_cpu_us_per_sequence is None
    single = saturation(batch_size=8.0)
    attach_model_cpu([single], references[:1], rounds=1)
    assert single.model_cpu_us_per_sequence == 100.0, "one round: the one reference"


def test_a_variant_axis_names_its_rows_and_refuses_variants_the_optimizer_does_not_build():
    config = MatrixConfig(configs=[{"stack": "clearml", "workers": [2], "variant": ["fp32", "int8"]}])
    assert [(r.name, r.variant) for r in config.runs()] == [("clearml-w2-on", ""), ("clearml-w2-on-int8", "int8")]
    assert Measurement("triton", 1, True, "bound", 0, 1, 1, 1, 1, 1, 1, 1, variant="int8").label.endswith(" int8")
    with pytest.raises(ValueError, match="variant must be fp32 or one of int8, fp16, not 'int4'"):
        MatrixConfig(configs=[{"stack": "triton", "variant": ["int4"]}]).runs()


def test_a_variant_that_is_not_built_is_left_out_with_the_command_that_builds_it(tmp_path):
    from loadtest.matrix.config import variant_dir
    from loadtest.matrix.run import with_variants

    model = tmp_path / "model"
    assert variant_dir(model, "int8") == tmp_path / "model-int8" and variant_dir(model, "") == model
    config = MatrixConfig(
        configs=[
            {"stack": "triton"},
            {"stack": "triton", "variant": ["int8"]},
            {"stack": "fastapi", "variant": ["", "int8"]},
        ]
    )
    kept, quality, left_out = with_variants(config, model)
    assert [r.name for r in kept.runs()] == ["triton-w1-on", "fastapi-w1-on"]
    assert quality == {}
    assert len(left_out) == 1 and "the int8 rows:" in left_out[0]
    assert f"serving model optimize --model-dir {model} --variant int8 --out {tmp_path / 'model-int8'}" in left_out[0]


def test_a_variant_s_rounds_get_no_model_cost_from_references_of_the_model_itself():
    references = [{"rate": 100.0, "cpu_us_per_sequence": {"1": 4000.0, "8": 2000.0}}] * 2
    rows = [saturation(batch_size=8.0), saturation(batch_size=8.0, variant="int8")]
    attach_model_cpu(rows, references, 1)
    assert rows[0].model_cpu_us_per_sequence == 2000.0 and rows[1].model_cpu_us_per_sequence is None

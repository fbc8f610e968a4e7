"""`loadtest ab` without a stack: the verdict from paired rounds, the interleaved order, the configuration names,
the report's table, the ETA."""

import pytest
from typer.testing import CliRunner

from loadtest.ab.compare import Comparison, ratio_text
from loadtest.ab.plan import BASE, HEAD, interleave, parse_configs, parse_models, run_spec
from loadtest.ab.report import markdown, rows, slower, table
from loadtest.ab.run import eta_text
from loadtest.cli import app
from loadtest.matrix.config import RunSpec


def throughput(base, head):
    return Comparison(base, head)


def test_each_round_s_ratio_pairs_head_with_the_base_of_the_same_round():
    c = throughput([100.0, 200.0, 400.0], [90.0, 200.0, 440.0])
    assert c.ratios == pytest.approx([0.9, 1.0, 1.1])
    assert (c.median, c.low, c.high) == pytest.approx((1.0, 0.9, 1.1))
    assert ratio_text(c) == "1.000 (0.900-1.100)"


def test_slower_needs_every_round_below_one_and_a_drop_beyond_the_ratios_range():
    assert throughput([100, 100, 100], [90, 91, 92]).verdict() == "slower", "9% drop, range 2%"
    assert throughput([100, 100, 100], [90, 91, 101]).verdict() == "no change", "one round faster"
    assert throughput([100, 100, 100], [85, 93, 99]).verdict() == "no change", "7% drop inside a 14% range"
    assert throughput([100, 100, 100], [97.9, 98, 98.1]).verdict() == "no change", "2% drop: under min_change"
    assert throughput([100, 100, 100], [97.9, 98, 98.1]).verdict(min_change=0.01) == "slower"


def test_faster_is_the_same_rule_above_one():
    assert throughput([100, 100, 100], [110, 111, 112]).verdict() == "faster"
    assert throughput([100, 100, 100], [101, 111, 125]).verdict() == "no change"


def test_one_round_gives_no_verdict_however_large_the_change():
    assert throughput([100], [50]).verdict() == "no verdict"


def test_a_cost_ratio_above_one_is_more_cpu():
    cpu = Comparison([1000, 1000, 1000], [1200, 1210, 1190], higher_is_better=False)
    assert cpu.verdict() == "more CPU"
    assert Comparison([1000, 1000], [800, 810], higher_is_better=False).verdict() == "less CPU"


def test_a_round_without_a_base_figure_is_left_out_of_the_ratios():
    c = Comparison([None, 100.0, 0.0], [50.0, 90.0, 80.0])
    assert c.ratios == pytest.approx([0.9])
    assert Comparison([], []).median is None and ratio_text(Comparison([], [])) == "-"


def test_the_trees_alternate_which_goes_first_between_pairs_and_rounds():
    steps = interleave(["tiny"], ["clearml-w1", "triton"], rounds=3)
    assert [s.tree[0] for s in steps] == list("HBBHBHHBHBBH"), "A B B A, B A A B, ..."
    assert [s.round for s in steps] == [1] * 4 + [2] * 4 + [3] * 4
    firsts = {}
    for first, second in zip(steps[::2], steps[1::2], strict=True):
        assert (first.round, first.key) == (second.round, second.key) and {first.tree, second.tree} == {HEAD, BASE}
        firsts.setdefault(first.key, []).append(first.tree)
    assert firsts == {"tiny clearml-w1": [HEAD, BASE, HEAD], "tiny triton": [BASE, HEAD, BASE]}


def test_every_model_and_configuration_runs_once_a_round_on_each_tree():
    steps = interleave(["tiny", "real"], ["clearml-w1", "clearml-w2", "triton"], rounds=3)
    assert len(steps) == 2 * 3 * 2 * 3
    assert len({(s.round, s.model, s.config, s.tree) for s in steps}) == len(steps)
    assert [s.model for s in steps[:12]] == ["tiny"] * 6 + ["real"] * 6


def test_configuration_names_map_to_the_matrix_driver_s():
    assert parse_configs("clearml-w1, clearml-w2,triton,clearml-w1") == ["clearml-w1", "clearml-w2", "triton"]
    assert run_spec("clearml-w2") == RunSpec("clearml", 2, True)
    assert run_spec("fastapi-w1") == RunSpec("fastapi", 1, True)
    assert run_spec("triton") == RunSpec("triton", 1, True)
    for bad in ("gateway", "triton-w2", "clearml-w0", ""):
        with pytest.raises(ValueError, match="clearml-w"):
            parse_configs(bad)
    assert parse_models("real,tiny") == ["real", "tiny"]
    with pytest.raises(ValueError, match="tiny, real"):
        parse_models("small")


def record(round_no, tree, tput, cpu=1000.0, success=1.0, config="clearml-w1", model="tiny", others=0.5):
    return {
        "cpus": {"stack": 1.2, "harness": 0.3, "others": others, "steal": 0.0, "idle": 0.0},
        "round": round_no,
        "tree": tree,
        "model": model,
        "config": config,
        "throughput": tput,
        "front_cpu_us_per_request": cpu,
        "success": success,
        "warnings": [],
    }


def test_the_report_pairs_finished_rounds_and_gives_each_configuration_its_verdicts():
    records = [
        record(1, HEAD, 90.0, 1100.0, others=0.2),
        record(1, BASE, 100.0, 1000.0, others=0.9),
        record(2, BASE, 100.0, 1000.0),
        record(2, HEAD, 91.0, 1110.0),
        record(3, HEAD, 92.0, 1105.0),
        record(3, BASE, 100.0, 1000.0),
        record(4, HEAD, 10.0, 1000.0),  # BASE's round 4 never ran: not paired, not counted
        record(1, HEAD, 500.0, config="triton", success=0.5),
        record(1, BASE, 500.0, config="triton"),
    ]
    (gateway, ensemble) = rows(records)
    assert gateway.throughput.ratios == pytest.approx([0.90, 0.91, 0.92])
    text = table(rows(records), 0.03)
    assert "| tiny | clearml-w1 | 100.0 | 91.0 | 0.910 (0.900-0.920) | slower | 1000 | 1105 " in text
    assert "| 1.105 (1.100-1.110) | more CPU | 0.5 (0.2-0.9) |" in text, "others' CPUs: median and min-max"
    assert "| tiny | triton | 500.0 | 500.0 | 1.000 (1.000-1.000) | no verdict |" in text
    assert slower(records, 0.03) == ["tiny clearml-w1"]
    meta = {
        "head": "abc + uncommitted changes",
        "head_root": "/h",
        "base": "def",
        "base_root": "/b",
        "base_env": "its own environment",
        "models": ["HEAD tiny up to date"],
        "rounds": 3,
        "concurrency": 32,
        "mix": "short",
        "warmup_seconds": 3.0,
        "duration": 10.0,
        "cpus": 2,
        "load": "1.00",
        "date": "today",
    }
    report = markdown(meta, records, 0.03)
    assert report.startswith("# HEAD against BASE: abc + uncommitted changes vs def")
    assert "- round 1 HEAD tiny triton: 50.00% success" in report
    assert "exceeds both the ratios' range (max - min) and 3%" in report


def test_the_eta_is_the_mean_step_times_the_steps_left():
    assert eta_text([], 5) == "ETA ?"
    assert eta_text([20.0, 40.0], 4) == "ETA 2 min 0 s"
    assert eta_text([10.0], 3) == "ETA 30 s"


def test_a_bad_configuration_is_refused_before_anything_starts():
    result = CliRunner().invoke(app, ["ab", "--configs", "gateway"])
    assert result.exit_code != 0 and "unknown configuration 'gateway'" in str(result.exception or result.output)

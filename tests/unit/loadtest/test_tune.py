"""The tuner's search over a known response surface (the trial function stands in for bringing a real stack up:
the search is the unit here; `loadtest tune` against real stacks is what `make bench` runs)."""

from pathlib import Path

from loadtest.tune import SPACES, Trial, TuneResult, bench_entry, defaults, tune, write


def surface(stack, model_dir, settings, seconds, concurrency) -> Trial:
    """More workers and a longer queue delay help throughput; a 2 ms delay breaks the SLO; 3 workers are slower."""
    rate = 100.0 * {1: 1.0, 2: 1.5, 3: 1.2}[settings["workers"]]
    rate *= {0: 1.0, 500: 0.9, 2000: 1.3}[settings["max_queue_delay_us"]]
    rate *= 1.1 if settings["encoder_instances"] == 2 else 1.0
    p99 = 400.0 if settings["max_queue_delay_us"] == 2000 else 100.0
    return Trial(dict(settings), rate, p99 / 2, p99, 1.0)


def test_coordinate_descent_keeps_the_best_that_meets_the_slo():
    result = tune("clearml", Path("unused"), slo_p99_ms=250, budget=20, measure=surface)
    best = result.best
    assert best.settings["workers"] == 2 and best.settings["encoder_instances"] == 2
    assert best.settings["max_queue_delay_us"] == 0, "2 ms was faster but missed the SLO"
    assert best.throughput == 100 * 1.5 * 1.1
    keys = [tuple(sorted((k, str(v)) for k, v in t.settings.items())) for t in result.trials]
    assert len(keys) == len(set(keys)), "no setting is measured twice"
    assert len(result.trials) == 1 + sum(len(v) - 1 for v in SPACES["clearml"].values())


def test_the_budget_bounds_the_trials_and_the_defaults_come_first():
    result = tune("clearml", Path("unused"), slo_p99_ms=250, budget=3, measure=surface)
    assert len(result.trials) == 3
    assert result.trials[0].settings == defaults("clearml")


def test_the_report_lists_every_trial_and_the_winner_as_a_matrix_entry(tmp_path):
    result = tune("clearml", Path("unused"), slo_p99_ms=250, budget=4, measure=surface)
    text = write(result, tmp_path).read_text()
    assert text.count("| {") == 4 and "Winner:" in text
    assert 'stack = "clearml"\nworkers = [2]' in result.matrix_entry()
    nothing = TuneResult("clearml", 1.0, 4, [surface("clearml", None, defaults("clearml"), 1, 1)])
    assert nothing.best is None and "No trial met the SLO." in write(nothing, tmp_path).read_text()


def test_make_bench_adds_the_winner_unless_its_matrix_already_runs_it():
    def won(settings):
        return TuneResult("clearml", 250, 4, [Trial({**defaults("clearml"), **settings}, 100.0, 50.0, 100.0, 1.0)])

    matrix = [{"stack": "fastapi", "workers": [1]}, {"stack": "clearml", "workers": [1, 2]}]
    assert bench_entry(won({"workers": 2}), matrix) is None, "clearml w2 at its defaults is in the matrix already"
    assert bench_entry(won({"workers": 3}), matrix) == {"stack": "clearml", "workers": [3], "tuning": {}}
    assert bench_entry(won({"coalesce_depth": 2}), matrix) == {
        "stack": "clearml",
        "workers": [1],
        "tuning": {"coalesce_depth": 2},
    }
    assert bench_entry(TuneResult("clearml", 250, 4, []), matrix) is None
    over_grpc = [{"stack": "clearml", "protocol": ["grpc"]}]
    assert bench_entry(won({}), over_grpc) == {"stack": "clearml", "workers": [1], "tuning": {}}, "tuned over HTTP"

"""A matrix run's outputs from its measurements: the report's table (fastest first, noisy configurations flagged,
efficiency where the model's cost is known), the ceiling's drift, the warnings; and `loadtest plot` redraws the
same report from summary.json."""

import csv
import json

from loadtest.matrix.config import MatrixConfig
from loadtest.matrix.measure import Measurement
from loadtest.matrix.report import efficiency_cells, headline, markdown, write_outputs
from loadtest.matrix.run import replot
from loadtest.matrix.summary import aggregate

INFO = {"cpus": 2, "cpu_model": "test CPU", "platform": "Linux", "python": "3.12.0"}
CEILING = {"rate": 200.0, "batch": 16, "start": 190.0, "end": 210.0, "cpu_us_per_sequence": {"1": 4000.0, "8": 2000.0}}


def measurement(stack, throughput, kind="saturation", round_no=1, **fields) -> Measurement:
    return Measurement(stack, 1, True, kind, None, throughput, 1.0, 5.0, 8.0, 12.0, 20.0, 50, round=round_no, **fields)


def run_measurements() -> list[Measurement]:
    return [
        measurement("fastapi", 50.0, batch_size=1.0, cpu_us_per_request=8000.0, front_cpu_us_per_request=8000.0),
        measurement("triton", 80.0, batch_size=8.0, cpu_us_per_request=4000.0, model_cpu_us_per_sequence=3000.0),
        measurement("triton", 120.0, round_no=2, batch_size=8.0, cpu_us_per_request=4000.0),
        measurement("triton", 60.0, kind="load", warnings=["the generator fell behind"]),
    ]


def test_the_report_lists_configurations_fastest_first_and_flags_noisy_ones():
    report = markdown("run-1", run_measurements(), CEILING, INFO, MatrixConfig(configs=[], rounds=2))
    rows = [line for line in report.splitlines() if line.startswith(("| fastapi", "| triton"))]
    assert [row.split(" | ")[0] for row in rows] == ["| triton w1 batching on", "| fastapi w1"]
    assert "| 100.0 | 80-120 (spread 40%) | 0.50 |" in rows[0]
    assert "Spread over 10% between rounds" in report and "triton w1 batching on (40%)" in report
    assert "in 2 interleaved round(s)" in report and "2 CPUs (test CPU)" in report
    assert "It was 190.0 at the start of the run and 210.0 at its end (+11%)" in report
    assert "![latency](latency.png)" in report, "open-loop levels ran"
    assert "- triton w1 batching on at 0 req/s: the generator fell behind" in report
    assert "## Why" not in report, "no traced configuration"


def test_efficiency_is_the_model_s_cost_over_the_stack_s():
    fastapi, triton = sorted(
        aggregate([m for m in run_measurements() if m.kind == "saturation"]), key=lambda s: s.stack
    )
    assert efficiency_cells(triton, CEILING) == "8.0 | 3000 | 75%", "its own round's reference"
    assert efficiency_cells(fastapi, CEILING) == "1.0 | 4000 | 50%", "else the run's averaged reference"
    fastapi.batch_size = 128.0
    assert efficiency_cells(fastapi, CEILING) == "128.0 | - | -", "beyond the measured batch sizes"
    fastapi.cpu_us_per_request = None
    assert efficiency_cells(fastapi, CEILING) == "- | - | -"


def test_replot_redraws_the_same_report_from_summary_json(tmp_path):
    measurements = [m for m in run_measurements() if m.kind == "saturation"]
    analyses = {"triton-w1-on": {"error": "no traces"}}
    write_outputs(tmp_path, measurements, CEILING, INFO, MatrixConfig(configs=[]), analyses)
    with open(tmp_path / "summary.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["label"] for row in rows] == ["fastapi w1", "triton w1 batching on", "triton w1 batching on"]
    assert "warnings" not in rows[0]
    assert json.loads((tmp_path / "machine.json").read_text()) == INFO
    assert (tmp_path / "throughput.png").stat().st_size and not (tmp_path / "latency.png").exists()
    first = (tmp_path / "report.md").read_text()
    assert "- **triton-w1-on**: no traces" in first
    (tmp_path / "report.md").unlink()
    replot(tmp_path)
    assert (tmp_path / "report.md").read_text() == first


def test_a_simulated_device_run_says_so_and_its_ceiling_is_the_devices():
    sim = CEILING | {"device": "sim", "sim": {"fixed_us": 642.0, "per_token_us": 4.25}}
    report = markdown("run-sim", run_measurements(), sim, INFO, MatrixConfig(configs=[], device="sim"))
    assert "Simulated device ceiling (642 us + 4.25 us a padded token) (no server, best batch size 16)" in report
    assert "Every encoder ran on the simulated accelerator" in report
    plain = markdown("run-cpu", run_measurements(), CEILING, INFO, MatrixConfig(configs=[]))
    assert "Raw ONNX Runtime ceiling" in plain and "simulated" not in plain


def bound(stack, rate, round_no=1, **fields) -> Measurement:
    """A search's answer: `rate` met the 250 ms bound."""
    return measurement(stack, rate, kind="bound", round_no=round_no, latency_bound_ms=250.0, goodput=rate, **fields)


def test_the_goals_divide_the_fastest_gateway_by_the_faster_ensemble_round_by_round():
    runs = [
        bound("minimal", 80.0),
        bound("triton", 100.0),
        bound("clearml", 90.0),
        bound("minimal", 70.0, round_no=2),
        bound("triton", 80.0, round_no=2),
        bound("clearml", 88.0, round_no=2),
        measurement("clearml", 140.0, batch_size=8.0, cpu_us_per_request=2500.0, model_cpu_us_per_sequence=2000.0),
    ]
    real = markdown("run-goals", runs, CEILING, INFO | {"model": "all-MiniLM-L6-v2"}, MatrixConfig(configs=[]))
    assert "## Goals" in real
    what = "| clearml w1 batching on ÷ triton w1 batching on (the faster ensemble), req/s at the latency bound"
    assert f"{what} (all-MiniLM-L6-v2) | ≥ 1.00× | 1.00× (0.90-1.10 over 2 of 2 rounds) | met |" in real
    assert (
        "| triton w1 batching on (the fastest) ÷ raw ONNX Runtime, req/s at the latency bound | ≥ 0.85× | 0.45× |"
        in real
    )
    assert "| clearml w1 batching on efficiency (closed loop) | ≥ 90% | 80% | not met |" in real
    tiny = markdown("run-goals", runs, CEILING, INFO | {"model": "tiny-bert"}, MatrixConfig(configs=[]))
    assert "| ≥ 0.90× | 1.00× (0.90-1.10 over 2 of 2 rounds) | met |" in tiny, "the overhead regime's goal"


def test_no_ratio_against_a_yardstick_the_run_cannot_show_is_the_faster():
    runs = [bound("minimal", 80.0), bound("clearml", 90.0), bound("fastapi", 60.0)]
    report = markdown("run-goals", runs, CEILING, INFO | {"model": "tiny-bert"}, MatrixConfig(configs=[]))
    assert (
        "No ratio: the yardstick is the faster of the plain ensemble (`minimal`) and the project's ensemble" in report
    )
    assert "this run has no `triton` configuration" in report
    assert "## Goals" not in report and "÷" not in report
    runs.append(bound("triton", 0.0))
    report = markdown("run-goals", runs, CEILING, INFO | {"model": "tiny-bert"}, MatrixConfig(configs=[]))
    assert "| clearml w1 batching on | 90.0 | 90-90 | 1.12× |" in report, "the minimal ensemble met it, triton did not"


def test_the_ranking_is_the_rate_at_the_bound_and_claims_an_order_only_where_three_rounds_allow():
    runs = []
    for round_no, (triton, clearml, fastapi) in enumerate([(100, 95, 50), (110, 120, 55), (105, 98, 52)], 1):
        runs += [bound("triton", triton, round_no), bound("clearml", clearml, round_no)]
        runs += [bound("fastapi", fastapi, round_no), measurement("fastapi", 300.0, round_no=round_no)]
    report = markdown("run-rank", runs, CEILING, INFO, MatrixConfig(configs=[], rounds=3))
    ranking = report[report.index("## Ranking: requests/s with p99 ≤ 250 ms, open loop") : report.index("## Closed")]
    rows = [line.split(" | ")[0] for line in ranking.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == ["| triton w1 batching on", "| clearml w1 batching on", "| fastapi w1"], "by the bound"
    assert "| fastapi w1 | 52.0 | 50-55 | - | 52.0 |" in ranking and "| 300.0 | defaults |" in ranking
    assert "No ratio:" in ranking, "no minimal ensemble in this run"
    assert "triton w1 batching on ≈ clearml w1 batching on > fastapi w1." in ranking
    assert "Python-backend model calling ONNX Runtime" in ranking and "within 250 ms" in ranking
    one = markdown("run-rank", [m for m in runs if m.round == 1], CEILING, INFO, MatrixConfig(configs=[]))
    assert "No order claimed: 1 round(s)" in one and " > " not in one
    printed = headline(report)
    assert printed.startswith("## Ranking: requests/s") and "| triton w1 batching on |" in printed
    assert "## Closed" not in printed and "![ranking]" not in printed, "the ranking section alone, up to its chart"


def test_a_run_without_a_bound_prints_its_closed_loop_table():
    printed = headline(markdown("run-1", run_measurements(), CEILING, INFO, MatrixConfig(configs=[], rounds=2)))
    assert printed.startswith("## Closed loop") and "| triton w1 batching on |" in printed
    assert "Server CPU: every process" not in printed and "![" not in printed


def test_a_round_that_met_the_bound_at_no_rate_counts_zero_but_lends_no_latency():
    from loadtest.matrix.ranking import ranked

    missed = bound("clearml", 0.0, round_no=2)
    missed.p99_ms, missed.cpu_us_per_request = 900.0, 9999.0
    runs = [bound("clearml", 90.0, cpu_us_per_request=1000.0), missed, bound("clearml", 110.0, round_no=3)]
    (summary,) = ranked(runs)
    assert (summary.throughput, summary.low, summary.high) == (90.0, 0.0, 110.0)
    assert summary.p99_ms == 12.0 and summary.goodput == 100.0, "the rounds that met the bound"
    assert summary.cpu_us_per_request == 1000.0


def test_a_variant_is_ranked_with_the_rest_but_never_made_the_yardstick_and_is_measured_against_the_model():
    runs = []
    for round_no, (triton, int8, clearml) in enumerate([(100, 210, 90), (110, 200, 100), (90, 190, 95)], 1):
        runs += [
            bound("minimal", 80.0, round_no),
            bound("triton", triton, round_no),
            bound("triton", int8, round_no, variant="int8"),
            bound("clearml", clearml, round_no),
        ]
    quality = {
        "int8": {
            "texts": 1200,
            "mean_cosine": 0.9946,
            "topk_agreement": 0.88,
            "gate": {"min_mean_cosine": 0.99, "min_topk_agreement": 0.9},
        }
    }
    info = INFO | {"model": "all-MiniLM-L6-v2", "variants": quality, "left_out": []}
    report = markdown("run-int8", runs, CEILING, info, MatrixConfig(configs=[]))
    assert "Yardstick: **triton w1 batching on**" in report, "the int8 row is faster but serves another model"
    assert "| triton w1 batching on int8 | 200.0 | 190-210 | 2.10× (1.82-2.11) |" in report
    assert "| clearml w1 batching on ÷ triton w1 batching on (the faster ensemble)" in report
    assert (
        "| triton w1 batching on int8 (the fastest int8) ÷ triton w1 batching on (the fastest fp32) | ≥ 2.00× | "
        "2.10× (1.82-2.11 over 3 rounds) | met |" in report
    )
    assert "| int8 mean cosine to the model (1200 held-out texts) | ≥ 0.99 | 0.9946 | met |" in report
    assert "| int8 topk agreement to the model (1200 held-out texts) | ≥ 0.9 | 0.8800 | not met |" in report
    assert "(the fastest) ÷ raw ONNX Runtime" in report and "int8 (the fastest) ÷ raw" not in report


def test_a_variant_left_out_of_the_run_is_said_in_the_report():
    info = INFO | {"model": "all-MiniLM-L6-v2", "left_out": ["the int8 rows: build/model-int8 is missing"]}
    report = markdown("run", [bound("triton", 100.0)], CEILING, info, MatrixConfig(configs=[]))
    assert "Left out: the int8 rows: build/model-int8 is missing" in report


def test_a_variant_s_row_has_no_efficiency_against_the_model_s_references():
    rows = [measurement("triton", 80.0, batch_size=8.0, cpu_us_per_request=4000.0, variant="int8")]
    (summary,) = aggregate(rows)
    assert efficiency_cells(summary, CEILING) == "8.0 | - | -"

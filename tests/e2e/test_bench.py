"""`loadtest matrix` (what `make bench` runs) on a tiny matrix: every output a user opens exists and is sound."""

from __future__ import annotations

import csv
import os
import struct
import subprocess
import sys
from pathlib import Path

LOADTEST = str(Path(sys.executable).parent / "loadtest")
TINY_MATRIX = """
mix = "short"
concurrency = 4
warmup_seconds = 0.5
saturation_seconds = 2
load_seconds = 1
load_levels = [0.5]
ceiling_seconds = 1
trace_ratio = 0.5
rounds = 2
search_seconds = 1
search_probes = 2

[[configs]]
stack = "fastapi"
workers = [1]

[[configs]]
stack = "clearml"
workers = [1]
"""


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path.name} is not a PNG"
    return struct.unpack(">II", data[16:24])


def test_tiny_matrix_writes_report_summary_and_charts(tmp_path, tiny_model):
    matrix = tmp_path / "tiny.toml"
    matrix.write_text(TINY_MATRIX)
    result = subprocess.run(
        [
            LOADTEST,
            "matrix",
            "--config",
            str(matrix),
            "--model-dir",
            str(tiny_model),
            "--out",
            str(tmp_path / "results"),
        ],
        capture_output=True,
        text=True,
        timeout=400,
        # the services export their spans every 0.5 s, not 5: the traced configurations' analyses (`settle`) have
        # them all sooner instead of waiting out the export interval
        env={**os.environ, "OTEL_BSP_SCHEDULE_DELAY": "500"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "## Ranking: requests/s with p99 ≤ 40 ms" in result.stdout, "the ranking is printed at the end"
    (run,) = (tmp_path / "results").iterdir()
    with open(run / "summary.csv") as handle:
        rows = list(csv.DictReader(handle))
    saturated = [row for row in rows if row["kind"] == "saturation"]
    assert all(float(row["throughput"]) > 0 and float(row["success"]) == 1.0 for row in saturated)
    assert all(float(row["cpu_us_per_request"]) > 0 for row in saturated)
    assert [row["label"] for row in saturated] == ["fastapi w1", "clearml w1 batching on"] * 2, "interleaved rounds"
    assert [row["round"] for row in saturated] == ["1", "1", "2", "2"]
    assert len([row for row in rows if row["kind"] == "load"]) == 2, "one open-loop level per configuration, last round"
    bound = [row for row in rows if row["kind"] == "bound"]
    assert [(row["label"], row["round"]) for row in bound] == [(row["label"], row["round"]) for row in saturated]
    assert all(float(row["latency_bound_ms"]) == 40.0 for row in bound), "the tiny model's default bound"
    probes = [row for row in rows if row["kind"] == "probe"]
    assert 4 <= len(probes) <= 8, "one or two probes per configuration and round"
    assert all(float(row["offered_rate"]) > 0 and float(row["goodput"]) >= 0 for row in probes)
    # figure sizes at 110 dpi: the bar chart is (max(6, 1.1 * bars + 2) x 4.5) inches, the latency chart 12 x 4.5
    assert png_size(run / "throughput.png") == (660, 495)
    assert png_size(run / "latency.png") == (1320, 495)
    report = (run / "report.md").read_text()
    assert "| fastapi w1 |" in report and "| clearml w1 batching on |" in report
    assert "in 2 interleaved round(s)" in report and "| min-max |" in report
    assert "at the start of the run" in report, "the ceiling is measured at the start and at the end"
    assert "| batch | ORT CPU us/seq at that batch | efficiency |" in report
    closed = report[report.index("## Closed loop (secondary)") :]
    clearml_row = next(line for line in closed.splitlines() if line.startswith("| clearml w1 batching on |"))
    assert clearml_row.count("%") >= 2, "the clearml row has its efficiency (and success) percentages"
    assert all(float(row["batch_size"]) >= 1 for row in saturated), "Triton's formed batch, 1 in-process"
    assert "![throughput](throughput.png)" in report and "![latency](latency.png)" in report
    assert "## Ranking: requests/s with p99 ≤ 40 ms, open loop" in report and png_size(run / "ranking.png")[0] > 0
    assert "No ratio: the yardstick is the faster of the plain ensemble" in report, "neither ensemble ran"
    # traced: each configuration's stage breakdown and verdict, with its own analysis and charts
    assert "## Why: where the time goes" in report
    for name in ("fastapi-w1-on", "clearml-w1-on"):
        assert f"**{name}**" in report and f"(traces/{name}/analysis.md)" in report
        analysis = (run / "traces" / name / "analysis.md").read_text()
        assert "**Verdict:**" in analysis and "| stage | in traces | p50 ms |" in analysis
        assert (
            png_size(run / "traces" / name / "waterfall.png")[0] > 0
            and (run / "traces" / name / "spans.db").stat().st_size
        )
    assert "closed loop" in (run / "traces" / "clearml-w1-on" / "analysis.md").read_text(), "levels by offered rate"

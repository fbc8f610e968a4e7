"""`serving analyze` on an OTLP/JSON export: prints the stage table and the verdict, writes the report and charts;
a missing source is a one-line error."""

import json

from typer.testing import CliRunner

from services.cli import app
from tests.unit.analysis.test_analysis import gateway_trace
from tests.unit.analysis.test_partition import failed_trace


def otlp_document(spans) -> dict:
    def attributes(values: dict) -> list:
        out = []
        for key, value in values.items():
            if isinstance(value, int):
                out.append({"key": key, "value": {"intValue": str(value)}})
                continue
            kind = "doubleValue" if isinstance(value, float) else "stringValue"
            out.append({"key": key, "value": {kind: value}})
        return out

    by_service: dict[str, list] = {}
    for s in spans:
        by_service.setdefault(s.service, []).append(
            {
                "traceId": s.trace_id,
                "spanId": s.span_id,
                "parentSpanId": s.parent_id,
                "name": s.name,
                "startTimeUnixNano": str(s.start_ns),
                "endTimeUnixNano": str(s.end_ns),
                "attributes": attributes({k: v for k, v in s.attributes.items() if v is not None}),
                "events": [{"name": k, "timeUnixNano": str(v)} for k, v in s.events.items()],
            }
        )
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                "scopeSpans": [{"spans": items}],
            }
            for service, items in by_service.items()
        ]
    }


def test_analyze_prints_the_verdict_and_writes_the_report(tmp_path):
    spans = [s for i in range(30) for s in gateway_trace(f"{i:032x}", preprocess_ms=5.0, rate=100.0)]
    export = tmp_path / "export.json"
    export.write_text(json.dumps(otlp_document(spans)))
    result = CliRunner().invoke(app, ["analyze", str(export), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "verdict: preprocessing (front)" in result.output and "| encoder infer |" in result.output
    assert "**Verdict:** preprocessing (front)" in (tmp_path / "out" / "analysis.md").read_text()
    assert (tmp_path / "out" / "stages.png").stat().st_size and (tmp_path / "out" / "waterfall.png").stat().st_size


def test_analyze_reads_and_writes_under_the_run_directory_by_default(tmp_path, monkeypatch):
    """Not `run/analysis` of the current directory (issue 42): SERVING_RUN_DIR keeps runs apart."""
    from services.analysis.store import SpanStore

    run_dir, elsewhere = tmp_path / "run-a", tmp_path / "cwd"
    elsewhere.mkdir()
    store = SpanStore(run_dir / "traces" / "spans.db")
    store.add([s for i in range(30) for s in gateway_trace(f"{i:032x}", preprocess_ms=5.0, rate=100.0)])
    store.close()
    monkeypatch.chdir(elsewhere)
    # --wait 0: the spans were just written, and waiting out their quiet time (6 s) is test_settle's subject
    result = CliRunner().invoke(app, ["analyze", "--wait", "0"], env={"SERVING_RUN_DIR": str(run_dir)})
    assert result.exit_code == 0, result.output
    assert (run_dir / "analysis" / "analysis.md").is_file() and not list(elsewhere.iterdir())


def test_analyze_without_spans_says_how_to_get_them(tmp_path):
    result = CliRunner().invoke(app, ["analyze", str(tmp_path / "nothing.db")])
    assert result.exit_code == 2 and "TRACES=1" in result.output


def test_analyze_names_a_span_store_it_cannot_read(tmp_path):
    """A spans.db that is no SQLite database (or a damaged one) ends the command with one line, not a traceback, both
    with and without the wait for late spans."""
    garbage = tmp_path / "spans.db"
    garbage.write_bytes(bytes(range(256)) * 20)
    for wait in ("1", "0"):
        result = CliRunner().invoke(app, ["analyze", str(garbage), "--wait", wait])
        assert result.exit_code == 2, (wait, result.output, result.exception)
        said = "".join(result.output.split())  # however the console wrapped it
        assert "".join(f"{garbage} is not a span store: file is not a database".split()) in said, wait


def test_analyze_counts_the_requests_that_timed_out(tmp_path):
    spans = [s for i in range(30) for s in gateway_trace(f"{i:032x}", rate=100.0)]
    spans += [s for i in range(4) for s in failed_trace(f"{i + 100:032x}", 0, "timeout")]
    export = tmp_path / "export.json"
    export.write_text(json.dumps(otlp_document(spans)))
    result = CliRunner().invoke(app, ["analyze", str(export), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "4 of 34 traced requests failed (timeout: 4)" in result.output
    assert (
        "**Not in the table**: 4 traced requests that failed or lack server spans (timeout: 4)"
        in (tmp_path / "out" / "analysis.md").read_text()
    )


def test_an_empty_since_window_says_how_old_the_newest_span_is(tmp_path):
    spans = [s for i in range(3) for s in gateway_trace(f"{i:032x}", preprocess_ms=5.0, rate=100.0)]
    export = tmp_path / "export.json"
    export.write_text(json.dumps(otlp_document(spans)))  # spans from the test helper's clock: long ago
    result = CliRunner().invoke(app, ["analyze", str(export), "--since", "30s", "--out", str(tmp_path / "out")])
    assert result.exit_code != 0
    assert "no span started in the last 30s; the newest started" in result.output
    assert "widen --since or leave it out" in result.output

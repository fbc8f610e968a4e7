"""`serving analyze`: read spans (the stack's store, or exported files), decompose each request into stages, judge
which stage saturates, print the tables and write the report."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import typer
from rich.console import Console

from services.common.cli import console, fail
from services.common.settings import RunSettings


def analyze(
    sources: list[Path] = typer.Argument(
        None,
        help="Span sources: the store (<run dir>/traces/spans.db, the default), OTLP/JSON or Jaeger JSON files.",
    ),
    out: Path = typer.Option(
        None, help="Where analysis.md, stages.png and waterfall.png go; default: <run dir>/analysis (SERVING_RUN_DIR)."
    ),
    since: str = typer.Option(None, "--since", help="Only traces newer than this: 30s, 10m, 2h."),
    as_json: bool = typer.Option(False, "--json", help="The analysis as JSON on stdout."),
) -> None:
    """Tracing-based bottleneck analysis: where each millisecond of a request goes, per load level, which stage
    saturates, and which knob to turn."""
    from observability.logreader import parse_since
    from services.analysis import report
    from services.analysis.decompose import decompose_all
    from services.analysis.verdict import analyze as analyze_traces

    run_dir = RunSettings().run_dir
    sources = sources or [run_dir / "traces" / "spans.db"]
    out = out or run_dir / "analysis"
    since_ns = int((time.time() - parse_since(since)) * 1e9) if since else 0
    spans = read_spans(sources, since_ns)
    try:
        analysis = analyze_traces(decompose_all(spans))
    except ValueError as error:
        fail(error)
    if as_json:
        print(json.dumps(dataclasses.asdict(analysis), indent=2))
        return
    stdout = Console(soft_wrap=True)
    for level in analysis.levels:
        stdout.print("\n".join(report.stage_table(level)), markup=False)
        stdout.print()
    stdout.print(f"verdict: {analysis.verdict}", markup=False)
    stdout.print(f"knob: {analysis.advice}", markup=False)
    for note in analysis.notes:
        stdout.print(f"note: {note}", markup=False)
    console.print(f"report: {report.write(analysis, out)}")


def read_spans(sources: list[Path], since_ns: int) -> list:
    """The spans that started at `since_ns` or later, from span stores (`.db`) and exported files alike; a missing
    source ends the command."""
    from services.analysis.spans import read_file
    from services.analysis.store import SpanStore

    spans = []
    for source in sources:
        if not source.is_file():
            fail(FileNotFoundError(f"no spans at {source}: start a stack with `make up TRACES=1` and load it first"))
        if source.suffix == ".db":
            store = SpanStore(source)
            spans += store.spans(since_ns)
            store.close()
        else:
            spans += [s for s in read_file(source) if s.start_ns >= since_ns]
    return spans

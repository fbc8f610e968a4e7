"""`serving analyze`: read spans (the stack's store, or exported files), decompose each request into stages, judge
which stage saturates, print the tables and write the report."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from services.common.cli import console, fail
from services.common.settings import RunSettings

if TYPE_CHECKING:
    from services.analysis.settle import Settled


def analyze(
    sources: list[Path] = typer.Argument(
        None,
        help="Span sources: the store (<run dir>/traces/spans.db, the default), OTLP/JSON or Jaeger JSON files.",
    ),
    out: Path = typer.Option(
        None, help="Where analysis.md, stages.png and waterfall.png go; default: <run dir>/analysis (SERVING_RUN_DIR)."
    ),
    since: str | None = typer.Option(None, "--since", help="Only traces newer than this: 30s, 10m, 2h."),
    as_json: bool = typer.Option(False, "--json", help="The analysis as JSON on stdout."),
    wait: float = typer.Option(
        30.0,
        min=0.0,
        help="Seconds to wait at most for spans still being exported (the services send theirs every 5 s): until "
        "every trace of the requests made before it has its spans, or none has arrived for 6 s. 0: analyse what the "
        "store holds now.",
    ),
) -> None:
    """Tracing-based bottleneck analysis: where each millisecond of a request goes, per load level, which stage
    saturates, and which knob to turn."""
    from observability.logreader import parse_since
    from services.analysis import report
    from services.analysis.decompose import INCOMPLETE, decompose_all
    from services.analysis.verdict import analyze as analyze_traces

    run_dir = RunSettings().run_dir
    sources = sources or [run_dir / "traces" / "spans.db"]
    out = out or run_dir / "analysis"
    since_ns = int((time.time() - parse_since(since)) * 1e9) if since else 0
    waits = [wait_for_spans(source, since_ns, wait) for source in sources if source.suffix == ".db"]
    spans = read_spans(sources, since_ns)
    if since and not spans:
        fail(f"no span started in the last {since}; {_newest_hint(sources)}")
    traces = decompose_all(spans)
    if waits and (due := sum(t.outcome == INCOMPLETE for t in traces)):
        if not wait:
            why = "--wait 0"
        elif any(not w.settled for w in waits):
            why = f"spans were still arriving after {wait:g} s"
        else:
            why = "no span arrived for a while"
        console.print(
            f"stopped waiting ({why}): {due} traces still due (answered requests without their server spans, "
            "the count in the report's note); they are left out: run `serving analyze` again to count the ones still "
            "on their way",
            markup=False,
        )
    try:
        analysis = analyze_traces(traces)
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


def wait_for_spans(store_path: Path, since_ns: int, timeout_s: float) -> Settled:
    """Wait (at most `timeout_s`) for the spans still on their way into the store at `store_path` (`settle`), saying
    on stderr what it waits for."""
    from services.analysis.settle import QUIET_S, Settled, Waiting, settle
    from services.analysis.store import Progress, SpanStore

    if not store_path.is_file():
        return Settled(True, Progress(0, 0, 0, 0))  # `read_spans` says there is none
    next_line = [0.0]

    def report(waiting: Waiting) -> None:
        if waiting.waited_s >= next_line[0]:  # a line every 2 s
            next_line[0] = waiting.waited_s + 2.0
            seen = waiting.seen
            due = f", {seen.due} traces still missing spans" if seen.due else ""
            console.print(
                f"waiting for spans still being exported: {seen.spans} recent spans{due}, none new for "
                f"{waiting.quiet_s:.0f} of {QUIET_S:.0f} s ({waiting.waited_s:.0f} s of at most {timeout_s:g} s)",
                markup=False,
            )

    try:
        store = SpanStore(store_path)
        try:
            return settle(store, since_ns, timeout_s=timeout_s, report=report)
        finally:
            store.close()
    except sqlite3.DatabaseError as error:
        fail(f"{store_path} is not a span store: {error}; move it away (the stack makes a new one) or name another")


def _newest_hint(sources: list[Path]) -> str:
    """What to do when a `--since` window holds no span: how long ago the newest one started, if any did."""
    newest = max((span.start_ns for span in read_spans(sources, 0)), default=None)
    if newest is None:
        return "none at all: send traced requests first (TRACES=1, `loadtest attack --trace-ratio 0.1`)"
    return f"the newest started {max(0.0, time.time() - newest / 1e9):.0f} s ago: widen --since or leave it out"


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
            try:
                store = SpanStore(source)
                spans += store.spans(since_ns)
                store.close()
            except sqlite3.DatabaseError as error:
                fail(f"{source} is not a span store: {error}; move it away (the stack makes a new one) or name another")
        else:
            spans += [s for s in read_file(source) if s.start_ns >= since_ns]
    return spans

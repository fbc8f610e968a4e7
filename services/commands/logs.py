"""`serving logs`: every process's log lines in the run directory, merged in time order, filtered, followed."""

from __future__ import annotations

import json
import time

import typer

from services.common.cli import fail
from services.common.settings import RunSettings


def logs(
    service: str = typer.Option(None, "--service", help="Only this process: gateway, controller, triton, fastapi, ..."),
    request_id: str = typer.Option(None, "--request-id", help="Only the lines of this request (x-request-id)."),
    trace_id: str = typer.Option(None, "--trace-id", help="Only the lines of this trace."),
    since: str = typer.Option(None, "--since", help="Only lines newer than this: 30s, 10m, 2h, 1d."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
    as_json: bool = typer.Option(False, "--json", help="The JSON lines themselves."),
) -> None:
    """Every process's log lines (run/logs/), merged in time order; a traceback prints under its line."""
    from observability.logreader import follow as follow_logs
    from observability.logreader import parse_since, read, render

    log_dir = RunSettings().run_dir / "logs"
    if not log_dir.is_dir():
        fail(ValueError(f"no logs in {log_dir}: start a stack with `make up DETACH=1` first"))
    filters = {
        "service": service,
        "request_id": request_id,
        "trace_id": trace_id,
        "since": time.time() - parse_since(since) if since else None,
    }
    show = (lambda e: print(json.dumps(e), flush=True)) if as_json else (lambda e: print(render(e), flush=True))
    for entry in read(log_dir, **filters):
        show(entry)
    if follow:
        try:
            for entry in follow_logs(log_dir, **filters):
                show(entry)
        except KeyboardInterrupt:
            pass

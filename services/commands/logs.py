"""`serving logs`: every process's log lines in the run directory, merged in time order, filtered, followed."""

from __future__ import annotations

import json
import time

import typer

from services.common.cli import console, fail
from services.common.settings import RunSettings


def logs(
    service: str | None = typer.Option(
        None, "--service", help="Only this process: gateway, controller, triton, fastapi, ..."
    ),
    request_id: str | None = typer.Option(None, "--request-id", help="Only the lines of this request (x-request-id)."),
    trace_id: str | None = typer.Option(None, "--trace-id", help="Only the lines of this trace."),
    since: str | None = typer.Option(None, "--since", help="Only lines newer than this: 30s, 10m, 2h, 1d."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
    as_json: bool = typer.Option(False, "--json", help="The JSON lines themselves."),
) -> None:
    """Every process's log lines (run/logs/), merged in time order; a traceback prints under its line."""
    from observability.logreader import completion_share, parse_since, read, render
    from observability.logreader import follow as follow_logs

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
    entries = read(log_dir, **filters)
    for entry in entries:
        show(entry)
    if request_id and not entries and not follow:
        console.print(not_found(request_id, completion_share(log_dir)), markup=False, highlight=False)
        raise typer.Exit(1)
    if follow:
        try:
            for entry in follow_logs(log_dir, filters=filters):
                show(entry)
        except KeyboardInterrupt:
            pass


def not_found(request_id: str, share: float | None) -> str:
    """Why no line has the id: a success writes its completion line at the sampled share, an error unless its route
    and status had their burst of lines already (`observability.repeats`)."""
    text = f"no log line has request id {request_id} in the run's logs"
    if share is not None and share < 1:
        text += (
            f": successful requests write their completion line only {share:g} of them "
            "(SERVING_COMPLETION_LOG_SAMPLE), so a 2xx may have been left out by that sampling"
        )
    return text + (
        "; an error writes its line unless its route and status wrote SERVING_ERROR_LOG_BURST lines already in "
        "SERVING_ERROR_LOG_INTERVAL (then a 'suppressed K similar lines' line counts it)"
    )

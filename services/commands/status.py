"""`serving status`: the processes recorded in the run directory (the real server's pid, state, readiness, restarts
and why the last one happened), the stack they make up, and whether its API is ready, as a table or as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import typer
from rich.console import Console

from services.common.cli_display import fit, report_console
from services.common.cli_display import table as listing
from services.common.settings import RunSettings

KNOBS = {"batching": ("triton", "clearml"), "device": ("fastapi", "triton", "clearml")}
"""The stacks each knob applies to: Triton's dynamic batching means nothing to STACK=fastapi."""


def status(
    as_json: bool = typer.Option(False, "--json", help="JSON on stdout, for scripts."),
    wide: bool = typer.Option(
        False,
        "--wide",
        help="One line per row whatever the terminal's width (paths unfolded; the default when not on a terminal).",
    ),
) -> None:
    """Every process `serving` started (PID, state, ready, restarts, uptime, ports), the model and endpoints served,
    the URLs."""
    report = stack_report(RunSettings().run_dir)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report, report_console(wide))


def stack_report(run_dir: Path) -> dict:
    """The recorded processes and, while any is recorded, the stack's description with what its API says it
    serves (`/health/ready`; Triton's own API has no such list)."""
    from services.launcher import process_status
    from services.stacks import read_stack_info

    processes = [row | {"ready": process_ready(row)} for row in process_status(run_dir)]
    info = read_stack_info(run_dir) if processes else {}
    for knob, stacks in KNOBS.items():
        if info.get("stack") not in stacks:
            info.pop(knob, None)
    if info.get("urls", {}).get("api") and info.get("stack") != "triton":
        try:
            ready = httpx.get(info["urls"]["api"] + "/health/ready", timeout=3).json()
            info["endpoints"], info["ready"] = ready.get("endpoints", []), ready.get("status") == "ready"
            if ready.get("config_errors"):
                info["config_errors"] = ready["config_errors"]
        except (httpx.HTTPError, ValueError):
            info["ready"] = False
    return {"processes": processes, **info}


def process_ready(row: dict) -> bool:
    """Whether the process serves now: its readiness URL answers 200 (asked now, not remembered) and its last
    liveness probe passed; one without a readiness URL is ready while it runs."""
    if row["state"] not in ("running", "wedged"):
        return False
    if not row.get("ready_url"):
        return row["state"] == "running"
    try:
        return httpx.get(row["ready_url"], timeout=2).status_code == 200 and row["state"] == "running"
    except httpx.HTTPError:
        return False


def print_report(report: dict, out: Console) -> None:
    """`stack_report` for a person: a table of the processes, then the stack, its endpoints and URLs. Paths are
    never cut: a log path too long for the terminal folds onto the next line of its cell (`report_console`: not even
    that with `--wide` or off a terminal)."""
    processes = report["processes"]
    if not processes:
        out.print("nothing is running (`make up` starts a stack)")
        return
    table = listing("process", "pid", "state", "ready", "restarts", "uptime", "ports", "log", whole=("log",))
    for row in processes:
        uptime = f"{row['uptime_seconds']}s" if row.get("uptime_seconds") is not None else "-"
        ports = ",".join(map(str, row.get("ports", [])))
        restarts = str(row["restarts"]) if "restarts" in row else "-"
        ready = "yes" if row["ready"] else "no"
        cells = (str(row.get("pid", "?")), row["state"], ready, restarts, uptime, ports, row.get("log") or "")
        table.add_row(row["name"], *cells)
    out.print(fit(table, out.width))
    for row in processes:
        if row.get("last_restart_reason"):
            out.print(f"{row['name']} last restarted: {row['last_restart_reason']}")
        if row["state"] == "wedged":
            out.print(f"[red]{row['name']} is wedged[/]: {row.get('last_probe_error')}")
    if "stack" not in report:
        return
    model = report["model"]
    knobs = " ".join(f"{knob.upper()}={report[knob]}" for knob in KNOBS if knob in report)
    out.print(
        f"STACK={report['stack']} WORKERS={report['workers']} {knobs}".rstrip() + ": "
        f"{model['name']} v{model['version']} ({model['task']}) from {model['dir']}",
        soft_wrap=True,  # a path stays whole, on one line
    )
    if "endpoints" in report:
        ready = "ready" if report.get("ready") else "not ready"
        out.print(f"endpoints: {', '.join(report['endpoints']) or 'none'} ({ready})")
    for problem, message in report.get("config_errors", {}).items():
        out.print(f"[red]not served[/] {problem}: {message}")
    for name, url in report["urls"].items():
        out.print(f"{name:>15}: {url}", soft_wrap=True)

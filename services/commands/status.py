"""`serving status`: the processes recorded in the run directory, the stack they make up, and whether its API is
ready, as a table or as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import typer
from rich.console import Console
from rich.table import Table

from services.common.settings import RunSettings


def status(as_json: bool = typer.Option(False, "--json", help="JSON on stdout, for scripts.")) -> None:
    """Every process `serving` started (PID, ports, state, uptime), the model and endpoints served, the URLs."""
    report = stack_report(RunSettings().run_dir)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)


def stack_report(run_dir: Path) -> dict:
    """The recorded processes and, while any is recorded, the stack's description with what its API says it
    serves (`/health/ready`; Triton's own API has no such list)."""
    from services.launcher import process_status
    from services.stacks import read_stack_info

    processes = process_status(run_dir)
    info = read_stack_info(run_dir) if processes else {}
    if info.get("urls", {}).get("api") and info.get("stack") != "triton":
        try:
            ready = httpx.get(info["urls"]["api"] + "/health/ready", timeout=3).json()
            info["endpoints"], info["ready"] = ready.get("endpoints", []), ready.get("status") == "ready"
            if ready.get("config_errors"):
                info["config_errors"] = ready["config_errors"]
        except (httpx.HTTPError, ValueError):
            info["ready"] = False
    return {"processes": processes, **info}


def print_report(report: dict) -> None:
    """`stack_report` for a person: a table of the processes, then the stack, its endpoints and URLs."""
    out = Console()
    processes = report["processes"]
    if not processes:
        out.print("nothing is running (`make up` starts a stack)")
        return
    table = Table("process", "pid", "state", "uptime", "ports", "log")
    for row in processes:
        uptime = f"{row['uptime_seconds']}s" if row.get("uptime_seconds") is not None else "-"
        ports = ",".join(map(str, row.get("ports", [])))
        table.add_row(row["name"], str(row.get("pid", "?")), row["state"], uptime, ports, row.get("log") or "")
    out.print(table)
    if "stack" not in report:
        return
    model = report["model"]
    out.print(
        f"STACK={report['stack']} WORKERS={report['workers']} BATCHING={report['batching']}: "
        f"{model['name']} v{model['version']} ({model['task']}) from {model['dir']}"
    )
    if "endpoints" in report:
        ready = "ready" if report.get("ready") else "not ready"
        out.print(f"endpoints: {', '.join(report['endpoints']) or 'none'} ({ready})")
    for problem, message in report.get("config_errors", {}).items():
        out.print(f"[red]not served[/] {problem}: {message}")
    for name, url in report["urls"].items():
        out.print(f"{name:>15}: {url}")

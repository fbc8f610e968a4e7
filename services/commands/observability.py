"""`serving observability`: a local Prometheus over the stack, recorded in the run directory like the stack's own
processes, so `serving down` stops it too."""

from __future__ import annotations

import typer

from services.common.cli import console, fail
from services.common.errors import ServingError
from services.common.settings import RunSettings

PAGES = {"graph": "queries", "targets": "what it scrapes, and why a job is down", "alerts": "alerts"}
"""Prometheus' own pages, under `/classic/` in the Debian package's Prometheus (2.42: `/targets` is a 404 there)."""


def observability(
    port: int = typer.Option(9090, help="Prometheus web port."),
) -> None:
    """Start a local Prometheus scraping the stack, Triton and the load generator (stopped by `serving down`)."""
    from services.launcher import Launcher, PortClaim, check_ports
    from services.prometheus import CONFIG_DIR, prometheus_process

    run_dir = RunSettings().run_dir
    try:
        spec = prometheus_process(CONFIG_DIR / "prometheus.yml", run_dir / "prometheus-data", port)
        check_ports([PortClaim(port, "Prometheus", "--port")])
        Launcher(run_dir).start_ready(spec, detach=True, timeout=60)
    except ServingError as error:
        fail(error)
    console.print(f"Prometheus on http://127.0.0.1:{port}; `make down` stops it")
    for page, what in PAGES.items():
        console.print(f"  http://127.0.0.1:{port}/classic/{page}  {what}")
    console.print("  the dashboards' queries: observability/grafana/dashboards/*.json (docs/monitoring.md)")

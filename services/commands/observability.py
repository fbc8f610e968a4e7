"""`serving observability`: a local Prometheus over the stack of this run directory (scraping the ports that stack
recorded), recorded in the run directory like the stack's own processes, so `serving down` stops it too."""

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
    """Start a local Prometheus scraping this run directory's stack, Triton and the load generator (stopped by
    `serving down`); with no stack running there, the default ports of `make up`."""
    from services.common.private import private_dir, write_private
    from services.launcher import Launcher, PortClaim, check_ports
    from services.prometheus import default_targets, prometheus_process, render_config, stack_targets

    run_dir = RunSettings().run_dir
    targets = stack_targets(run_dir)
    if targets is None:
        targets = default_targets()
        console.print(f"no stack runs in {run_dir}: scraping the default ports of `make up`")
    else:
        console.print(f"scraping the stack running in {run_dir}")
    for job, addresses in targets.items():
        console.print(f"  {job}: {', '.join(addresses) or 'nothing (not part of this stack)'}", markup=False)
    try:
        config = write_private(private_dir(run_dir) / "prometheus.yml", render_config(targets))
        spec = prometheus_process(config, run_dir / "prometheus-data", port)
        check_ports([PortClaim(port, "Prometheus", "--port")])
        Launcher(run_dir).start_ready(spec, detach=True, timeout=60)
    except ServingError as error:
        fail(error)
    console.print(f"Prometheus on http://127.0.0.1:{port}; `make down` stops it")
    for page, what in PAGES.items():
        console.print(f"  http://127.0.0.1:{port}/classic/{page}  {what}")
    console.print("  the dashboards' queries: observability/grafana/dashboards/*.json (docs/monitoring.md)")

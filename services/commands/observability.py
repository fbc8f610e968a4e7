"""`serving observability`: a local Prometheus over the stack, recorded in the run directory like the stack's own
processes, so `serving down` stops it too."""

from __future__ import annotations

import typer

from services.common.cli import console, fail
from services.common.errors import ServingError
from services.common.settings import RunSettings


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
    console.print(f"Prometheus on http://127.0.0.1:{port} (dashboards: observability/grafana/); `make down` stops it")

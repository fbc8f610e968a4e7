"""`serving triton-agent`: one Triton host of a scaled-out installation (several Triton replicas, no shared volume):
the agent that keeps its Triton holding every live version, and that Triton (`services.replica.host`).

Settings come from the environment (`AGENT_*`, SERVING_RUN_DIR, SERVING_STATE_URL, MLFLOW_TRACKING_URI:
`services.replica.settings`); the options below override the most used ones."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import typer

ADDRESS = typer.Option(None, help="Where Triton binds its ports (AGENT_ADDRESS; default 127.0.0.1).")
HTTP_PORT = typer.Option(None, help="Triton HTTP port (AGENT_HTTP_PORT; default 8000).")
GRPC_PORT = typer.Option(None, help="Triton gRPC port, the one the gateways reach (AGENT_GRPC_PORT; default 8001).")
METRICS_PORT = typer.Option(None, help="Triton metrics port (AGENT_METRICS_PORT; default 8002).")
MODEL_DIR = typer.Option(None, help="A built-in model served as `encoder` beside the deployed versions.")
PREPARE_ONLY = typer.Option(
    False,
    help="Place the live versions into the repository, print the --load-model flags and exit (an init step "
    "before a Triton started by someone else).",
)


def triton_agent(
    address: str = ADDRESS,
    http_port: int = HTTP_PORT,
    grpc_port: int = GRPC_PORT,
    metrics_port: int = METRICS_PORT,
    model_dir: Path = MODEL_DIR,
    prepare_only: bool = PREPARE_ONLY,
) -> None:
    """Run a Triton replica with its agent: every live version fetched from the registry and placed before Triton
    starts, new versions loaded and old ones removed as the deployment state says, its ready versions reported."""
    from observability.logging import setup_logging
    from services.replica.host import run
    from services.replica.settings import AgentSettings

    given: dict[str, Any] = {
        "address": address,
        "http_port": http_port,
        "grpc_port": grpc_port,
        "metrics_port": metrics_port,
        "model_dir": model_dir,
    }
    settings = AgentSettings(**{key: value for key, value in given.items() if value is not None})
    setup_logging("INFO", json_lines=settings.log_json)
    run(settings, prepare_only=prepare_only)
    # Triton is stopped and every report is in the store: nothing is left to finalize, and the interpreter's own
    # teardown of MLflow and SQLAlchemy takes seconds (the controller ends the same way).
    sys.stdout.flush()
    logging.shutdown()
    os._exit(0)

"""The MLflow UI over the registry's store, as one more process for the launcher (`serving registry`).

MLflow's server also runs its job executor by default (a job runner and several huey consumer processes, for its
GenAI jobs); the registry's UI needs none of it, and without it the UI holds a third of the memory (the figures:
docs/troubleshooting.md)."""

from __future__ import annotations

import sys
from pathlib import Path

from services.launcher import ProcessSpec
from services.registry.settings import RegistrySettings

STORE_VARIABLE = "MLFLOW_BACKEND_STORE_URI"
"""The store's URI goes to `mlflow server` through its environment (the variable its `--backend-store-uri` reads),
never its command line: a URI may hold the database's password, and every user of the host can list command lines."""
STOP_TIMEOUT = 5.0
"""Seconds `serving down` gives the UI before SIGKILL. Its uvicorn child drains in about a second; the `mlflow server`
parent then spends seconds more in interpreter teardown (docs/decisions/measured-defaults.md) with nothing left to
save (the store is written by uvicorn, and SQLite's journal covers a kill): it is not waited for."""


def ui_process(settings: RegistrySettings, host: str, port: int) -> ProcessSpec:
    mlflow = str(Path(sys.executable).parent / "mlflow")
    argv = [mlflow, "server", "--host", host, "--port", str(port), "--workers", "1"]
    if settings.uri.startswith("sqlite:"):
        argv += ["--default-artifact-root", settings.artifact_uri]
    return ProcessSpec(
        name="mlflow-ui",
        argv=argv,
        env={STORE_VARIABLE: settings.uri, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        ports=[port],
        ready_url=f"http://127.0.0.1:{port}/health",
        stop_timeout=STOP_TIMEOUT,
    )

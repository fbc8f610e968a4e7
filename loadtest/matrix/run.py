"""`loadtest matrix` (and `loadtest bench`, `loadtest plot`): run every configuration of a matrix file in
interleaved rounds, the raw ONNX Runtime ceiling measured before the first round and after each round (every round
is judged against its own machine), then write results/<run-id>/."""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.metadata
import json
import os
import platform
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from loadtest.ceiling import ceiling, ceiling_name
from loadtest.matrix.config import MatrixConfig, variant_dir
from loadtest.matrix.goals import gateway_goals, variant_goals
from loadtest.matrix.measure import Measurement, run_config
from loadtest.matrix.report import write_outputs
from loadtest.matrix.summary import aggregate, attach_model_cpu, reference_summary
from loadtest.metrics import GeneratorMetrics
from loadtest.sentences import MIXES
from services.common.contract import MANIFEST_FILE, QUALITY_FILE, Manifest, sha256_file
from services.common.errors import ServingError
from services.optimize.quality import QualityReport

console = Console(stderr=True)


def machine_info() -> dict:
    """machine.json: CPUs, platform, Python, the versions of the packages that set the figures, the date."""
    packages = {}
    for name in ("onnxruntime", "tokenizers", "nvidia-pytriton", "tritonclient", "fastapi", "uvicorn", "gunicorn"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            packages[name] = importlib.metadata.version(name)
    cpu_model = ""
    with contextlib.suppress(OSError, StopIteration):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu_model = next(line.split(":", 1)[1].strip() for line in lines if "model name" in line)
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "packages": packages,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def run_matrix(config: MatrixConfig, model_dir: Path, out_root: Path, metrics_port: int | None = None) -> Path:
    """The whole run into OUT_ROOT/<run-id>/ (returned); with `metrics_port`, the generator's Prometheus metrics
    are served there while it runs."""
    out = out_root / dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    raw_dir = out / "raw"
    raw_dir.mkdir(parents=True)
    metrics = None
    if metrics_port:
        metrics = GeneratorMetrics()
        metrics.serve(metrics_port)
    info = machine_info() | {"model": Manifest.load(model_dir).name}
    config, info["variants"], info["left_out"] = with_variants(config, model_dir)
    for why in info["left_out"]:
        console.print(f"[bold yellow]left out[/]: {why}")
    texts = MIXES[config.mix](512)
    references = [ceiling(model_dir, texts, config.ceiling_seconds, **config.device_settings)]
    console.print(
        f"{ceiling_name(references[0])}: {references[0]['rate']:.1f} sequences/s at batch {references[0]['batch']}"
    )
    measurements: list[Measurement] = []
    analyses: dict = {}
    bound_ms = config.bound_ms(info["model"]) if config.search else None
    if bound_ms:
        console.print(f"ranking by the highest open-loop rate with p99 <= {bound_ms:g} ms ({info['model']})")
    for round_no in range(1, config.rounds + 1):
        measurements += _round(config, round_no, model_dir, raw_dir, metrics, analyses, bound_ms)
        if config.rounds > 1:  # the reference after every round: each round is judged against its own machine
            references.append(ceiling(model_dir, texts, config.ceiling_seconds, **config.device_settings))
            console.print(
                f"{ceiling_name(references[-1])} after round {round_no}: {references[-1]['rate']:.1f} sequences/s"
            )
    attach_model_cpu(measurements, references, config.rounds)
    summary = reference_summary(references)
    write_outputs(out, measurements, summary, info, config, analyses)
    saturated = aggregate([m for m in measurements if m.kind == "saturation"])
    goals = gateway_goals(measurements, saturated, summary, info["model"]) + variant_goals(
        measurements, info["variants"]
    )
    for goal in goals:
        console.print(f"goal: {goal.what}: {goal.measured} (target {goal.target}): {'met' if goal.met else 'not met'}")
    return out


def with_variants(config: MatrixConfig, model_dir: Path) -> tuple[MatrixConfig, dict[str, dict], list[str]]:
    """The matrix without the variants that cannot run (not built from this model, or damaged: each said in the
    third value, with the command that builds it), and the quality report of each that can, by name."""
    quality: dict[str, dict] = {}
    left_out: dict[str, str] = {}
    for variant in dict.fromkeys(run.variant for run in config.runs() if run.variant):
        where = variant_dir(model_dir, variant)
        build = f"serving model optimize --model-dir {model_dir} --variant {variant} --out {where}"
        try:
            manifest = Manifest.load(where)
            report = QualityReport.model_validate_json((where / QUALITY_FILE).read_text())
            current = sha256_file(model_dir / MANIFEST_FILE)
        except (ServingError, ValueError, OSError) as exc:
            left_out[variant] = f"the {variant} rows: {where} is missing or unreadable ({exc}); build it: {build}"
            continue
        if manifest.optimization is None or manifest.optimization.source_manifest != current:
            left_out[variant] = f"the {variant} rows: {where} was not built from {model_dir} as it is now; {build}"
            continue
        quality[variant] = report.model_dump(mode="json")
    if not left_out:
        return config, quality, []
    configs = []
    for entry in config.configs:
        kept = [v for v in entry.get("variant", [""]) if v not in left_out]
        if kept:
            configs.append({**entry, "variant": kept} if "variant" in entry else entry)
    return replace(config, configs=configs), quality, list(left_out.values())


def _round(
    config: MatrixConfig,
    round_no: int,
    model_dir: Path,
    raw_dir: Path,
    metrics: GeneratorMetrics | None,
    analyses: dict,
    bound_ms: float | None = None,
) -> list[Measurement]:
    """Every configuration once, each searched under `bound_ms`; only the last round runs the open-loop levels and
    analyses the traces."""
    last = round_no == config.rounds
    runs = config.runs()
    measurements: list[Measurement] = []
    for index, run in enumerate(runs, 1):
        console.print(
            f"[bold]round {round_no}/{config.rounds} ({index}/{len(runs)})[/] STACK={run.stack} "
            f"WORKERS={run.workers} BATCHING={'on' if run.batching else 'off'} PADDING={run.padding}"
            + (f" {run.tracing}" if run.tracing else "")
            + (f" VARIANT={run.variant}" if run.variant else "")
            + (f" over {run.protocol}" if run.protocol != "http" else "")
        )
        measurements += run_config(
            config,
            run,
            model_dir,
            raw_dir,
            metrics,
            analyses if last else None,
            round_no,
            None if last else [],
            bound_ms,
        )
    return measurements


def replot(out: Path) -> None:
    """Redraw the charts and report of a finished run from its summary.json (and machine.json). The matrix file is
    not kept with the run: the report's method paragraph shows the MatrixConfig defaults for the mix, concurrency
    and phase lengths."""
    data = json.loads((out / "summary.json").read_text())
    fields = set(Measurement.__dataclass_fields__)
    measurements = [Measurement(**{k: v for k, v in row.items() if k in fields}) for row in data["measurements"]]
    config = MatrixConfig(configs=[])
    machine = json.loads((out / "machine.json").read_text())
    write_outputs(out, measurements, data["ceiling"], machine, config, data.get("analyses"))

"""`loadtest matrix`, `loadtest tune`, `loadtest bench` and `loadtest plot`: the benchmark driver's commands (each
brings its own stacks up and down)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from loadtest.cli.options import ModelDir, RunMetricsPort, RunsOut

if TYPE_CHECKING:
    from loadtest.matrix.config import MatrixConfig

console = Console(stderr=True)

Device = Annotated[str | None, typer.Option(help="cpu | sim: where every encoder runs (default: the matrix file's).")]
LatencyBound = Annotated[
    float | None,
    typer.Option(
        min=0.001,
        help="The p99 bound (ms) the configurations are ranked at (default: the matrix file's, else the model's: "
        "250 on the CPU, 40 for the tiny model, 50 on DEVICE=sim).",
    ),
]


def matrix_command(
    config: Path = typer.Option(Path("loadtest/matrices/default.toml"), help="Matrix file (TOML)."),
    model_dir: ModelDir = Path("build/model"),
    out: RunsOut = Path("results"),
    metrics_port: RunMetricsPort = None,
    device: Device = None,
    latency_bound_ms: LatencyBound = None,
) -> None:
    """Every STACK x WORKERS x BATCHING in the matrix file, ranked by the highest open-loop rate under a p99 bound,
    with a report and charts."""
    from loadtest.matrix.run import run_matrix

    path = run_matrix(_matrix(config, device, latency_bound_ms), model_dir, out, metrics_port)
    _print_ranking(path)


def _matrix(config: Path, device: str | None, latency_bound_ms: float | None) -> MatrixConfig:
    """The matrix file with the command line's device and bound (those given) in place of its own."""
    from loadtest.matrix.config import MatrixConfig

    matrix = MatrixConfig.load(config)
    return replace(
        matrix,
        device=matrix.device if device is None else device,
        latency_bound_ms=matrix.latency_bound_ms if latency_bound_ms is None else latency_bound_ms,
    )


def tune_command(
    stack: str = typer.Argument(..., help="fastapi | triton | clearml | minimal (the plain ensemble)"),
    slo_p99_ms: float = typer.Option(250.0, help="The p99 latency a winner must stay under, ms."),
    budget: int = typer.Option(8, min=1, help="Trials at most (each brings the stack up and saturates it)."),
    seconds: float = typer.Option(8.0, min=1.0, help="Saturation seconds per trial."),
    concurrency: int = typer.Option(32, min=1, help="Closed-loop workers per trial."),
    model_dir: ModelDir = Path("build/model"),
    out: Path = typer.Option(Path("results/tune"), help="tune-STACK.md and .json go here."),
    device: str = typer.Option("cpu", help="Where the encoder runs: cpu | sim (the simulated accelerator)."),
) -> None:
    """Search the settings that matter (WORKERS; Triton's queue delay, preferred batch sizes, instances; ONNX
    Runtime threads) for the highest throughput whose p99 meets the SLO; prints the winner as a matrix entry."""
    from loadtest.tune import tune, write

    result = tune(
        stack,
        model_dir,
        slo_p99_ms=slo_p99_ms,
        budget=budget,
        seconds=seconds,
        concurrency=concurrency,
        device=device,
    )
    console.print(f"report: {write(result, out)}")
    if result.best is None:
        console.print(f"no trial met p99 <= {slo_p99_ms:g} ms")
        raise typer.Exit(1)
    print(result.matrix_entry())


def bench_command(
    config: Path = typer.Option(Path("loadtest/matrices/bench.toml"), help="The matrix (without tuned entries)."),
    slo_p99_ms: float = typer.Option(250.0, help="p99 SLO for the tuning."),
    budget: int = typer.Option(4, min=1, help="Tuning trials per stack."),
    model_dir: ModelDir = Path("build/model"),
    out: RunsOut = Path("results"),
    metrics_port: RunMetricsPort = None,
    latency_bound_ms: LatencyBound = None,
) -> None:
    """`make bench`: tune every stack and the plain ensemble (bounded), then race them at their tuned settings
    beside their defaults in interleaved rounds, ranked by the highest open-loop rate under a p99 bound."""
    from loadtest.matrix.run import run_matrix
    from loadtest.tune import bench_entry, tune, write

    matrix = _matrix(config, None, latency_bound_ms)
    for stack in ("minimal", "fastapi", "triton", "clearml"):
        console.print(f"[bold]tuning {stack}[/] ({budget} trials, p99 <= {slo_p99_ms:g} ms)")
        result = tune(stack, model_dir, slo_p99_ms=slo_p99_ms, budget=budget)
        write(result, out / "tune")
        entry = bench_entry(result, matrix.configs)
        if entry is None:
            console.print(f"{stack}: the matrix already runs the tuning's winner (or nothing met the SLO)")
        else:
            matrix.configs.append(entry)
    path = run_matrix(matrix, model_dir, out, metrics_port)
    _print_ranking(path)


def _print_ranking(run: Path) -> None:
    """The report's ranking (`headline`) on stdout, then where the whole report is."""
    from loadtest.matrix.report import headline

    print(headline((run / "report.md").read_text()), flush=True)
    console.print(f"report: {run / 'report.md'}")


def plot_command(run: Path = typer.Argument(..., help="A results/<run-id> directory.")) -> None:
    """Redraw a run's charts and report from its summary.json."""
    from loadtest.matrix.run import replot

    replot(run)
    console.print(f"report: {run / 'report.md'}")

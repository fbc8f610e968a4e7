"""`loadtest matrix`, `loadtest tune`, `loadtest bench` and `loadtest plot`: the benchmark driver's commands (each
brings its own stacks up and down)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from loadtest.cli.options import ModelDir, RunMetricsPort, RunsOut

console = Console(stderr=True)


def matrix_command(
    config: Path = typer.Option(Path("loadtest/matrices/default.toml"), help="Matrix file (TOML)."),
    model_dir: ModelDir = Path("build/model"),
    out: RunsOut = Path("results"),
    metrics_port: RunMetricsPort = None,
) -> None:
    """Reproduce the study: every STACK x WORKERS x BATCHING in the matrix file, with a report and charts."""
    from loadtest.matrix.config import MatrixConfig
    from loadtest.matrix.run import run_matrix

    path = run_matrix(MatrixConfig.load(config), model_dir, out, metrics_port)
    console.print(f"report: {path / 'report.md'}")


def tune_command(
    stack: str = typer.Argument(..., help="fastapi | triton | clearml"),
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
) -> None:
    """`make bench`: tune every stack (bounded), then race them at their tuned settings beside their defaults and
    the minimal Triton ensemble, in interleaved rounds."""
    from loadtest.matrix.config import MatrixConfig
    from loadtest.matrix.run import run_matrix
    from loadtest.tune import bench_entry, tune, write

    matrix = MatrixConfig.load(config)
    for stack in ("fastapi", "triton", "clearml"):
        console.print(f"[bold]tuning {stack}[/] ({budget} trials, p99 <= {slo_p99_ms:g} ms)")
        result = tune(stack, model_dir, slo_p99_ms=slo_p99_ms, budget=budget)
        write(result, out / "tune")
        entry = bench_entry(result, matrix.configs)
        if entry is None:
            console.print(f"{stack}: the matrix already runs the tuning's winner (or nothing met the SLO)")
        else:
            matrix.configs.append(entry)
    path = run_matrix(matrix, model_dir, out, metrics_port)
    console.print(f"report: {path / 'report.md'}")


def plot_command(run: Path = typer.Argument(..., help="A results/<run-id> directory.")) -> None:
    """Redraw a run's charts and report from its summary.json."""
    from loadtest.matrix.run import replot

    replot(run)
    console.print(f"report: {run / 'report.md'}")

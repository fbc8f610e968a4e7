"""`loadtest overload` and `loadtest soak`: a fresh stack past its capacity (and, for the soak, a long run below
it); both exit 1 unless every check passes."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import typer
from rich.console import Console

from loadtest.cli.options import ModelDir, RunsOut, Stack, Workers
from loadtest.overload.config import OverloadConfig

console = Console(stderr=True)


def _run(config: OverloadConfig, model_dir: Path, out: Path) -> None:
    from loadtest.overload.run import run

    report, path = run(config, model_dir, out / dt.datetime.now().strftime("%Y%m%d-%H%M%S"))
    console.print(f"report: {path / 'report.md'}")
    if not report.passed:
        raise typer.Exit(1)


def overload_command(
    stack: Stack = "clearml",
    workers: Workers = 2,
    model_dir: ModelDir = Path("build/model"),
    factor: float = typer.Option(3.0, min=1.0, help="Offered load as a multiple of the saturated rate."),
    seconds: float = typer.Option(60.0, min=1.0, help="Length of the overload."),
    saturate: float = typer.Option(10.0, min=1.0, help="Seconds of closed loop that measure the saturated rate."),
    procs: int = typer.Option(OverloadConfig.procs, min=1, help="Generator processes for the open-loop attack."),
    out: RunsOut = Path("results/overload"),
) -> None:
    """Attack a fresh stack at FACTOR x its saturated rate; exit 1 unless it sheds cleanly, keeps its goodput and
    memory, and recovers (the checks are printed and written to report.md). Goodput and p99 are judged against the
    CPU the stack could use in each phase, measured and reported with them: on a shared machine its neighbours'
    load is not held against it."""
    config = OverloadConfig(
        stack=stack, workers=workers, factor=factor, overload_seconds=seconds, saturate_seconds=saturate, procs=procs
    )
    _run(config, model_dir, out)


def soak_command(
    stack: Stack = "clearml",
    workers: Workers = 2,
    model_dir: ModelDir = Path("build/model"),
    minutes: float = typer.Option(30.0, min=0.1, help="Length of the soak."),
    fraction: float = typer.Option(0.7, min=0.05, max=1.0, help="Soak rate as a fraction of the saturated rate."),
    overload_seconds: float = typer.Option(60.0, min=1.0, help="Length of the 3x overload that comes first."),
    procs: int = typer.Option(OverloadConfig.procs, min=1, help="Generator processes for the open-loop phases."),
    out: RunsOut = Path("results/soak"),
) -> None:
    """The overload test, then a long run at FRACTION of the saturated rate: errors, latency and memory over
    time (soak.png)."""
    config = OverloadConfig(
        stack=stack,
        workers=workers,
        overload_seconds=overload_seconds,
        soak_seconds=minutes * 60,
        soak_fraction=fraction,
        soak_bin_seconds=max(5.0, minutes * 60 / 120),
        procs=procs,
    )
    _run(config, model_dir, out)

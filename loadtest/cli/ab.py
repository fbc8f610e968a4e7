"""`loadtest ab` (`make bench-ab BASE=<rev>`): a revision raced against this checkout in interleaved rounds."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from loadtest.ab.compare import MIN_CHANGE


def say(line: str) -> None:
    """A progress line on stderr, as written (stdout carries the report)."""
    print(line, file=sys.stderr, flush=True)


def ab_command(
    base: str = typer.Option(
        None,
        help="The revision to race (branch, tag, sha). Default: where this branch left main (git merge-base main "
        "HEAD); on main itself, HEAD's commit when the working tree has uncommitted changes, else HEAD~1.",
    ),
    rounds: int = typer.Option(3, min=1, help="Interleaved rounds (each runs every configuration on both trees)."),
    models: str = typer.Option("tiny,real", help="tiny (2-layer random BERT) and/or real (all-MiniLM-L6-v2)."),
    configs: str = typer.Option(
        "clearml-w1,clearml-w2,triton", help="clearml-wN (the gateway, N workers), triton (the ensemble), fastapi-wN."
    ),
    duration: float = typer.Option(10.0, min=0.5, help="Measured seconds of closed loop per step."),
    warmup: float = typer.Option(3.0, min=0.0, help="Warm-up seconds before each measurement."),
    concurrency: int = typer.Option(32, min=1, help="Closed-loop workers."),
    min_change: float = typer.Option(
        MIN_CHANGE, min=0.0, help="Smallest change (a share) a verdict may call, however steady the rounds."
    ),
    base_env: str = typer.Option(
        "auto",
        help="BASE's environment. shared: this checkout's, with PYTHONPATH=BASE's worktree (only the code differs); "
        "own: `make setup` in BASE's worktree (minutes, then kept); auto: shared when both pyproject.toml files "
        "declare the same `project` table, else own.",
    ),
    work_dir: Path = typer.Option(
        Path("build/bench-ab"),
        help="Where BASE's worktree (base-<sha>/, its environment and models) and the tiny models go.",
    ),
    tiny_checkpoint: Path = typer.Option(
        None, help="The tiny checkpoint both trees export; default: one `serving model tiny` writes into WORK_DIR."
    ),
    out: Path = typer.Option(Path("results/bench-ab"), help="report.md, rounds.json, raw/ go to OUT/<timestamp>/."),
    fail_on_slower: bool = typer.Option(False, help="Exit 1 when a configuration's verdict is `slower`."),
) -> None:
    """Race BASE against this checkout (uncommitted changes included): each tree's stack served by its own code,
    both never up at once, in interleaved rounds (A B, B A, ...) on the tiny and the real model; prints each
    configuration's HEAD/BASE throughput and CPU ratios (median, min-max) and a verdict."""
    from loadtest.ab.plan import parse_configs, parse_models
    from loadtest.ab.race import race
    from loadtest.ab.report import slower
    from loadtest.ab.run import AbSettings
    from loadtest.ab.trees import TreeError
    from services.common.cli import fail

    settings = AbSettings(
        rounds=rounds,
        models=parse_models(models),
        configs=parse_configs(configs),
        concurrency=concurrency,
        warmup_seconds=warmup,
        duration=duration,
        min_change=min_change,
    )
    try:
        path, records, report = race(
            base, settings, work_dir, out, base_env=base_env, tiny_checkpoint=tiny_checkpoint, log=say
        )
    except TreeError as error:
        fail(error)
    print(report)
    say(f"report: {path / 'report.md'}")
    flagged = slower(records, min_change)
    if fail_on_slower and flagged:
        say(f"slower: {', '.join(flagged)}")
        raise typer.Exit(1)

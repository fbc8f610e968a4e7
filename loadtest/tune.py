"""`loadtest tune STACK`: the settings that matter, searched for the highest saturated throughput whose p99 stays
under an SLO, within a bounded number of trials (what Triton's model-analyzer does for one model, for a whole
stack).

The search is coordinate descent from the defaults: one setting at a time, each of its candidate values tried with
the best values found so far for the others, the best kept. Each trial brings the stack up with those settings,
warms it up and measures it with a closed loop (the benchmark's saturation measurement). Every trial is written
down, so the search can be read and rerun.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

from rich.console import Console

from loadtest import engine
from loadtest.report import summarize
from loadtest.stackrun import running_stack

console = Console(stderr=True)

# The settings that matter per stack, each with its candidate values; the first value is the default.
SPACES: dict[str, dict[str, list]] = {
    "fastapi": {"workers": [1, 2, 3], "intra_op_threads": [None, 1, 2]},
    "triton": {
        "max_queue_delay_us": [2000, 500, 5000],
        "preferred_batch_sizes": [[], [8, 16, 32]],
        "tokenizer_instances": [1, 2],
        "encoder_instances": [1, 2],
        "intra_op_threads": [None, 1],
    },
    "minimal": {  # the plain ensemble of loadtest/minimal, tuned as the project's ensemble is
        "max_queue_delay_us": [2000, 500, 5000],
        "preferred_batch_sizes": [[], [8, 16, 32]],
        "tokenizer_instances": [1, 2],
        "encoder_instances": [1, 2],
    },
    "clearml": {
        "workers": [1, 2, 3],
        "coalesce_depth": [1, 2],
        "max_queue_delay_us": [0, 500, 2000],
        "preferred_batch_sizes": [[], [8, 16, 32]],
        "encoder_instances": [1, 2],
        "intra_op_threads": [None, 1],
    },
}


def defaults(stack: str) -> dict:
    """The settings a stack runs with untuned (the first candidate of each)."""
    return {name: values[0] for name, values in SPACES[stack].items()}


@dataclass
class Trial:
    settings: dict
    throughput: float
    p50_ms: float
    p99_ms: float
    success: float

    def meets(self, slo_ms: float) -> bool:
        return self.p99_ms <= slo_ms and self.success >= 0.999


@dataclass
class TuneResult:
    stack: str
    slo_p99_ms: float
    budget: int
    trials: list[Trial] = field(default_factory=list)

    @property
    def best(self) -> Trial | None:
        meeting = [t for t in self.trials if t.meets(self.slo_p99_ms)]
        return max(meeting, key=lambda t: t.throughput) if meeting else None

    def winner(self) -> tuple[int, dict] | None:
        """The best trial as (WORKERS, the settings that differ from the defaults); None if none met the SLO."""
        if self.best is None:
            return None
        settings = dict(self.best.settings)
        workers = settings.pop("workers", 1)
        base = defaults(self.stack)
        return workers, {k: v for k, v in settings.items() if v is not None and v != base.get(k)}

    def matrix_entry(self) -> str:
        """The winner as a matrix file entry (`make bench` runs these)."""
        winner = self.winner()
        if winner is None:
            return ""
        workers, changed = winner
        tuning = ", ".join(f"{k} = {json.dumps(v)}" for k, v in changed.items())
        entry = f'[[configs]]\nstack = "{self.stack}"\nworkers = [{workers}]\n'
        return entry + (f"tuning = {{ {tuning} }}\n" if tuning else "")


def bench_entry(result: TuneResult, configs: list[dict]) -> dict | None:
    """The winner as a config for `make bench`'s matrix; None when nothing met the SLO or when the matrix already
    runs the winner (its defaults, at a WORKERS the matrix has, serving the model itself over HTTP)."""
    winner = result.winner()
    if winner is None:
        return None
    workers, tuning = winner
    untuned = [
        c
        for c in configs
        if c.get("stack") == result.stack
        and not c.get("tuning")
        and set(c.get("variant", [""])) <= {"", "fp32"}
        and "http" in c.get("protocol", ["http"])
    ]
    if not tuning and any(workers in c.get("workers", [1]) for c in untuned):
        return None
    return {"stack": result.stack, "workers": [workers], "tuning": tuning}


def measure(
    stack: str, model_dir: Path, settings: dict, seconds: float, concurrency: int, device: str = "cpu"
) -> Trial:
    knobs = {k: v for k, v in settings.items() if k != "workers" and v is not None}
    workers = settings.get("workers", 1)
    with running_stack(stack, model_dir, workers=workers, tuning=knobs, device=device) as running:
        targets = running.targets()
        engine.closed_run(targets, 2.0, concurrency)  # warm-up
        results, stats = engine.closed_run(targets, seconds, concurrency)
    summary = summarize(results)
    ok = sum(1 for r in results if 200 <= r.code < 300)
    return Trial(
        settings,
        ok / stats.wall_seconds,
        summary["latencies"]["50th"] / 1e6,
        summary["latencies"]["99th"] / 1e6,
        summary["success"],
    )


def tune(
    stack: str,
    model_dir: Path,
    *,
    slo_p99_ms: float,
    budget: int,
    seconds: float = 8.0,
    concurrency: int = 32,
    measure: Callable[..., Trial] = measure,
    device: str = "cpu",
) -> TuneResult:
    """`measure(stack, model_dir, settings, seconds, concurrency) -> Trial` runs one trial (a real stack by
    default, its encoder on `device`)."""
    if device != "cpu":
        measure = partial(measure, device=device)
    if stack not in SPACES:
        raise ValueError(f"no search space for STACK '{stack}'; choose one of {', '.join(SPACES)}")
    space = SPACES[stack]
    result = TuneResult(stack, slo_p99_ms, budget)
    current = {name: values[0] for name, values in space.items()}
    tried: dict[str, Trial] = {}

    def run(settings: dict) -> Trial | None:
        key = json.dumps(settings, sort_keys=True)
        if key in tried:
            return tried[key]
        if len(result.trials) >= budget:
            return None
        trial = measure(stack, model_dir, settings, seconds, concurrency)
        tried[key] = trial
        result.trials.append(trial)
        mark = "meets" if trial.meets(slo_p99_ms) else "misses"
        console.print(
            f"trial {len(result.trials)}/{budget}: {settings} -> {trial.throughput:.1f} req/s, "
            f"p99 {trial.p99_ms:.0f} ms ({mark} the SLO)"
        )
        return trial

    best = run(dict(current))
    for name, values in space.items():
        for value in values[1:]:
            candidate = {**current, name: value}
            trial = run(candidate)
            if trial is None:
                return result
            if trial.meets(slo_p99_ms) and (
                best is None or not best.meets(slo_p99_ms) or trial.throughput > best.throughput
            ):
                best, current = trial, candidate
    return result


def write(result: TuneResult, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"tune-{result.stack}.json").write_text(
        json.dumps({**asdict(result), "best": asdict(result.best) if result.best else None}, indent=2)
    )
    lines = [
        f"# loadtest tune {result.stack}: p99 SLO {result.slo_p99_ms:g} ms, {len(result.trials)} of "
        f"{result.budget} trials",
        "",
        "What ran: each trial a closed loop (its concurrency a client setting, not a batching stack's capacity), the "
        "SLO on its p99; locally Triton's encoder is a Python-backend model over ONNX Runtime, where the container "
        "templates use the native onnxruntime backend.",
        "",
        "| settings | req/s | p50 ms | p99 ms | meets SLO |",
        "|---|---:|---:|---:|---|",
    ]
    for t in result.trials:
        lines.append(
            f"| {t.settings} | {t.throughput:.1f} | {t.p50_ms:.1f} | {t.p99_ms:.1f} | "
            f"{'yes' if t.meets(result.slo_p99_ms) else 'no'} |"
        )
    best = result.best
    lines += ["", f"Winner: {best.settings} at {best.throughput:.1f} req/s." if best else "No trial met the SLO."]
    if best:
        lines += ["", "As a matrix entry:", "", "```toml", result.matrix_entry(), "```"]
    path = out / f"tune-{result.stack}.md"
    path.write_text("\n".join(lines) + "\n")
    return path

"""The race: every step of the interleaved plan in turn (one tree's stack up, warmed up, saturated with a closed loop
by the matrix driver's `ConfigRound`, down), with a progress line and an ETA before each, every round's figures
written to rounds.json as they come."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from loadtest.ab.compare import MIN_CHANGE
from loadtest.ab.plan import DEFAULT_CONFIGS, MODELS, Step, interleave, run_spec
from loadtest.ab.stack import tree_stack
from loadtest.ab.trees import Tree
from loadtest.matrix.config import MatrixConfig
from loadtest.matrix.measure import ConfigRound
from loadtest.overload import cpu


@dataclass
class AbSettings:
    """What `loadtest ab` was asked for."""

    rounds: int = 3
    models: list[str] = field(default_factory=lambda: list(MODELS))
    configs: list[str] = field(default_factory=lambda: list(DEFAULT_CONFIGS))
    concurrency: int = 32
    warmup_seconds: float = 3.0
    duration: float = 10.0
    """Seconds of the measured closed loop, after the warm-up."""
    mix: str = "short"
    min_change: float = MIN_CHANGE
    ready_timeout: float = 240.0

    def matrix(self) -> MatrixConfig:
        """The matrix driver's phases for one measured point: warm-up, then the saturated closed loop."""
        return MatrixConfig(
            configs=[],
            mix=self.mix,
            concurrency=self.concurrency,
            warmup_seconds=self.warmup_seconds,
            saturation_seconds=self.duration,
        )


def eta_text(elapsed: list[float], remaining: int) -> str:
    """`ETA 6 min 10 s` from the mean of the steps so far; `ETA ?` before the first has ended."""
    if not elapsed:
        return "ETA ?"
    seconds = round(sum(elapsed) / len(elapsed) * remaining)
    return f"ETA {seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"ETA {seconds} s"


def run_steps(
    trees: dict[str, Tree],
    models: dict[tuple[str, str], Path],
    settings: AbSettings,
    out: Path,
    log: Callable[[str], None] = print,
) -> list[dict]:
    """Every step in order; returns one record a step (the step, the measurement's fields, its seconds), also
    written to OUT/rounds.json after each step. `models` maps (tree, model) to the model directory it serves."""
    steps = interleave(settings.models, settings.configs, settings.rounds)
    records: list[dict] = []
    elapsed: list[float] = []
    for index, step in enumerate(steps, 1):
        eta = eta_text(elapsed, len(steps) - index + 1)
        log(
            f"[ab] step {index}/{len(steps)}: round {step.round}/{settings.rounds}, {step.tree} "
            f"({trees[step.tree].label}), {step.model} model, {step.config} ({eta})"
        )
        started = time.monotonic()
        record = run_step(step, trees[step.tree], models[(step.tree, step.model)], settings, out)
        elapsed.append(time.monotonic() - started)
        records.append(record | {"seconds": round(elapsed[-1], 1)})
        (out / "rounds.json").write_text(json.dumps(records, indent=2))
    return records


def run_step(step: Step, tree: Tree, model_dir: Path, settings: AbSettings, out: Path) -> dict:
    """One tree's stack up for the step, its saturated closed loop, down; with who had the machine's CPUs meanwhile
    (the stack, the load generator, other processes, steal, idle: warm-up and measurement). Its run directory is
    kept only when the step fails (its logs say why)."""
    spec = run_spec(step.config)
    raw_dir = out / "raw" / step.tree.lower() / step.model
    raw_dir.mkdir(parents=True, exist_ok=True)
    run_dir = out / "runs" / f"r{step.round}-{step.tree.lower()}-{step.model}-{step.config}"
    with tree_stack(tree, spec, model_dir, run_dir, settings.ready_timeout) as stack:
        start = cpu.read(stack)
        measurement = ConfigRound(settings.matrix(), spec, stack, raw_dir, step.round).saturate()
        phase = cpu.phase_cpu(start, cpu.read(stack), cpu.cpu_limit())
        served_from = sorted(map(str, stack.working_dirs()))
    shutil.rmtree(run_dir, ignore_errors=True)
    cpus = {k: round(getattr(phase, k), 3) for k in ("stack", "harness", "others", "steal", "idle")}
    return asdict(step) | {"commit": tree.label, "served_from": served_from, "cpus": cpus} | asdict(measurement)

"""What `loadtest ab` runs and in which order: the configurations by name, the models, and the interleaved steps
(each a tree's stack up for one configuration and one model in one round, never two at once)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from loadtest.matrix.config import RunSpec

HEAD, BASE = "HEAD", "BASE"
MODELS = ("tiny", "real")
"""tiny: the seeded 2-layer random BERT of `serving model tiny` (the server's own costs dominate, as with a real
model on a fast GPU); real: all-MiniLM-L6-v2 (`make model`)."""
DEFAULT_CONFIGS = ("clearml-w1", "clearml-w2", "triton")
_NAME = re.compile(r"(clearml|fastapi)-w([1-9][0-9]?)|triton")


def parse_configs(text: str) -> list[str]:
    """`clearml-w1,clearml-w2,triton` as a list; a name that is not STACK-wN (clearml, fastapi) or `triton` is a
    ValueError naming the forms."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if not _NAME.fullmatch(name):
            raise ValueError(f"unknown configuration '{name}': use clearml-wN, fastapi-wN or triton (N workers)")
    if not names:
        raise ValueError("--configs names no configuration: use e.g. clearml-w1,clearml-w2,triton")
    return list(dict.fromkeys(names))


def parse_models(text: str) -> list[str]:
    """`tiny,real` as a list, each one of MODELS."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in MODELS]
    if unknown or not names:
        raise ValueError(f"--models takes a comma-separated list of {', '.join(MODELS)}, not '{text}'")
    return list(dict.fromkeys(names))


def run_spec(config: str) -> RunSpec:
    """The matrix driver's configuration for a name: `clearml-w2` -> clearml, 2 workers, batching on."""
    match = _NAME.fullmatch(config)
    if match is None:
        raise ValueError(f"unknown configuration '{config}'")
    if config == "triton":
        return RunSpec("triton", 1, True)
    return RunSpec(match.group(1), int(match.group(2)), True)


@dataclass(frozen=True)
class Step:
    round: int
    model: str
    config: str
    tree: str
    """HEAD or BASE."""

    @property
    def key(self) -> str:
        """`tiny clearml-w1`: the row of the report the step belongs to."""
        return f"{self.model} {self.config}"


def interleave(models: list[str], configs: list[str], rounds: int) -> list[Step]:
    """Every (model, configuration) once per round, both trees back to back; which tree goes first alternates
    from one pair to the next and from one round to the next (A B, B A, A B, ...), so neither tree always runs
    first, after the same neighbour, or on the same side of a drift."""
    steps = []
    pairs = [(model, config) for model in models for config in configs]
    for round_no in range(1, rounds + 1):
        for index, (model, config) in enumerate(pairs):
            first, second = (HEAD, BASE) if (round_no + index) % 2 == 1 else (BASE, HEAD)
            steps += [Step(round_no, model, config, first), Step(round_no, model, config, second)]
    return steps

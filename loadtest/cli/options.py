"""Options that several `loadtest` commands take with the same meaning: declared once, each command keeps its own
default (`model_dir: ModelDir = Path("build/model")`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ModelDir = Annotated[Path, typer.Option(help="Exported model.")]
RunsOut = Annotated[Path, typer.Option(help="Runs are written to OUT/<run-id>/.")]
RunMetricsPort = Annotated[
    int | None, typer.Option(help="Serve the generator's Prometheus metrics here during the run.")
]
Stack = Annotated[str, typer.Option(help="fastapi | triton | clearml")]
Workers = Annotated[int, typer.Option(min=1, help="Front-end worker processes.")]


def labels(pairs: list[str]) -> dict[str, str]:
    """`--label key=value` pairs as a dict; a pair without `=` is a usage error."""
    found = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise typer.BadParameter(f"--label takes key=value, not '{pair}'")
        found[key] = value
    return found

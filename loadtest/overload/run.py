"""`loadtest overload` and `loadtest soak`: bring a fresh stack up, overload it (and soak it when asked), print the
verdicts, write OUT/report.md, report.json, the raw results and the charts."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from rich.console import Console

from loadtest.overload.config import OverloadConfig
from loadtest.overload.judge import OverloadReport
from loadtest.overload.phases import SoakReport, overload, soak
from loadtest.overload.report import markdown
from loadtest.stackrun import running_stack

console = Console(stderr=True)


def run(config: OverloadConfig, model_dir: Path, out: Path) -> tuple[OverloadReport, Path]:
    """The whole test against a stack of its own; returns the overload's report and OUT."""
    out.mkdir(parents=True, exist_ok=True)
    with running_stack(config.stack, model_dir, workers=config.workers, batching=config.batching) as stack:
        report = overload(config, stack, out / "raw")
        console.print(f"CPUs at saturation: {report.cpu_saturation.describe()}")
        console.print(f"CPUs during the overload: {report.cpu_overload.describe()}")
        for verdict in report.verdicts:
            mark = "[green]pass[/]" if verdict.passed else "[bold red]FAIL[/]"
            console.print(f"{mark} {verdict.name}: {verdict.detail}")
        soaked = None
        if config.soak_seconds > 0:
            rate = round(config.soak_fraction * report.saturated_rate, 1)
            console.print(f"soak: {config.soak_seconds / 60:g} min at {rate:.1f} req/s")
            soaked = soak(config, stack, rate)
    write(config, report, soaked, out)
    return report, out


def write(config: OverloadConfig, report: OverloadReport, soaked: SoakReport | None, out: Path) -> None:
    """overload.png (and soak.png), report.json and report.md into OUT."""
    from loadtest.plots import timeline_chart

    timeline_chart(report.timeline, f"Overload at {report.offered_rate:.0f} req/s", out / "overload.png")
    if soaked is not None:
        timeline_chart(soaked.timeline, f"Soak at {soaked.rate:.0f} req/s", out / "soak.png")
    data = {"config": asdict(config), "overload": asdict(report), "soak": asdict(soaked) if soaked else None}
    (out / "report.json").write_text(json.dumps(data, indent=2))
    (out / "report.md").write_text(markdown(config, report, soaked))

"""Benchmark: the three stacks side by side in one run, against raw ONNX Runtime at its best batch size.

Each configuration is brought up with the same launcher as `make up`, warmed up, then driven by `hey` (closed loop,
fixed concurrency, one short English sentence: the original study's setup). Raw ONNX Runtime (no server, same
threads) is measured first in the same run as the ceiling. For the gateway, the CPU time its processes spend per
request (HTTP, parsing, tokenization, gRPC client: everything outside Triton) is read from /proc.

    .venv/bin/python -m loadtest.compare_stacks --seconds 15 --concurrency 32
Needs `hey` (Debian: apt-get install hey).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from loadtest.ceiling import raw_onnxruntime
from loadtest.stackrun import running_stack
from loadtest.targets import build_target

SENTENCE = "The quick brown fox jumps over the lazy dog while the cat watches."
console = Console(width=150)


@dataclass
class Row:
    name: str
    rate: float
    p50_ms: float | None = None
    p99_ms: float | None = None
    errors: int = 0
    cpu_us_per_request: float | None = None


def hey(url: str, body: str, seconds: float, concurrency: int) -> tuple[float, float, float, int]:
    out = subprocess.run(
        ["hey", "-z", f"{seconds}s", "-c", str(concurrency), "-m", "POST", "-T", "application/json", "-d", body, url],
        capture_output=True, text=True, check=True,
    ).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = float(re.search(r"50% in ([\d.]+) secs", out).group(1)) * 1000
    p99 = float(re.search(r"99% in ([\d.]+) secs", out).group(1)) * 1000
    codes = {int(c): int(n) for c, n in re.findall(r"\[(\d+)\]\s+(\d+) responses", out)}
    errors = sum(n for c, n in codes.items() if c != 200) + len(re.findall(r"^\s+\[\d+\]\s+Post", out, re.M))
    return rate, p50, p99, errors


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU time of every live process in a process group (children included once they exit)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # field 5: pgrp
            total += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / ticks
    return total


def run_stack(model_dir: Path, stack: str, workers: int, batching: bool, seconds: float, concurrency: int) -> Row:
    with running_stack(stack, model_dir, workers=workers, batching=batching) as running:
        target = build_target(running.base_url, running.request_format, [SENTENCE])
        hey(target.url, target.body.decode(), 3, concurrency)  # warm-up
        cpu_before = group_cpu_seconds(running.front_pid)
        rate, p50, p99, errors = hey(target.url, target.body.decode(), seconds, concurrency)
        cpu = group_cpu_seconds(running.front_pid) - cpu_before
    name = f"{stack}, workers {workers}" if stack != "triton" else "triton ensemble"
    if stack != "fastapi":
        name += f", batching {'on' if batching else 'off'}"
    per_request = cpu / (rate * seconds) * 1e6 if stack == "clearml" and rate else None
    return Row(name, rate, p50, p99, errors, per_request)


def main(
    model_dir: Path = typer.Option(Path("build/model"), help="Exported model."),
    seconds: float = typer.Option(15.0, help="Length of each measured attack."),
    concurrency: int = typer.Option(32, help="hey -c"),
    out: Path = typer.Option(Path("results/compare_stacks.json"), help="Where to write the rows as JSON."),
) -> None:
    if shutil.which("hey") is None:
        raise typer.BadParameter("hey is not installed (Debian: apt-get install hey)")
    rates = raw_onnxruntime(model_dir, [SENTENCE] * 64, seconds)
    rows = [Row(f"raw onnxruntime, batch {batch}", rate) for batch, rate in rates.items()]
    ceiling = max(rows, key=lambda r: r.rate)
    console.print(f"raw onnxruntime ceiling: {ceiling.rate:.1f} seq/s ({ceiling.name})")
    configs = [("fastapi", 1, True), ("fastapi", 2, True), ("triton", 1, False), ("triton", 1, True),
               ("clearml", 1, True), ("clearml", 2, True), ("clearml", 4, True)]
    for stack, workers, batching in configs:
        row = run_stack(model_dir, stack, workers, batching, seconds, concurrency)
        console.print(f"{row.name}: {row.rate:.1f} req/s")
        rows.append(row)
    table = Table("configuration", "req/s", "x ceiling", "p50 ms", "p99 ms", "errors", "gateway CPU us/req",
                  title=f"hey -c {concurrency}, {seconds:g} s each, one sentence; ceiling = {ceiling.name}")
    for row in rows:
        table.add_row(row.name, f"{row.rate:.1f}", f"{row.rate / ceiling.rate:.2f}",
                      f"{row.p50_ms:.1f}" if row.p50_ms is not None else "-",
                      f"{row.p99_ms:.1f}" if row.p99_ms is not None else "-", str(row.errors),
                      f"{row.cpu_us_per_request:.0f}" if row.cpu_us_per_request else "-")
    console.print(table)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps([asdict(r) for r in rows], indent=2))


if __name__ == "__main__":
    typer.run(main)

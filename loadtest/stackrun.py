"""A stack for the benchmark driver, the tuning and the overload test: brought up on free ports with the launcher
and process specs `make up` use, its processes' CPU and resident memory read from /proc, the batches Triton formed
read from its metrics, and taken down."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from services.common.devices import DEFAULT_FIXED_US, DEFAULT_PER_TOKEN_US
from services.launcher import Launcher, ProcessSpec, free_port
from services.stacks import StackOptions, Tuning, stack_processes, trace_receiver, triton_tracing_args
from services.triton.server import TritonPorts, triton_process

DIRECT_TRITON = ("triton", "minimal")
"""Stacks whose requests go straight to Triton's HTTP port (the KServe v2 format, the `ensemble` model)."""


def groups_cpu_seconds(pgids: list[int]) -> dict[int, float]:
    """User + system CPU time of every live process in each process group (with the children they waited for),
    from one pass over /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    totals = dict.fromkeys(pgids, 0.0)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) in totals:  # field 5: pgrp
            totals[int(fields[2])] += (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / ticks
    return totals


def groups_rss(pgids: list[int]) -> dict[int, tuple[int, str, int]]:
    """Resident memory of every live process in the process groups: pid -> (group, command name, bytes)."""
    page = os.sysconf("SC_PAGE_SIZE")
    found = {}
    wanted = set(pgids)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            name = text[text.index("(") + 1 : text.rindex(")")]
            fields = text.rsplit(")", 1)[1].split()
        except (OSError, ValueError):
            continue
        if int(fields[2]) in wanted:  # field 5: pgrp; field 24: rss in pages
            found[int(stat.parent.name)] = (int(fields[2]), name, int(fields[21]) * page)
    return found


@dataclass
class RunningStack:
    options: StackOptions
    launcher: Launcher | None
    """What started the processes here; None for a stack another command started (`loadtest.ab.stack`)."""

    @property
    def base_url(self) -> str:
        """Where the stack's API answers: Triton's HTTP port for STACK=triton, else the API port."""
        port = self.options.triton_ports.http if self.options.stack in DIRECT_TRITON else self.options.port
        return f"http://127.0.0.1:{port}"

    def targets(self, mix: str = "short", per_request: int = 1, count: int = 400) -> list:
        """Requests in the stack's own format, to its built-in endpoint (the model's name unless one was set)."""
        from loadtest.sentences import MIXES
        from loadtest.targets import build_targets
        from services.common.contract import Manifest

        endpoint = self.options.endpoint or Manifest.load(self.options.model_dir).endpoint_name
        texts = MIXES[mix](max(count, 50 * per_request))
        return build_targets(self.base_url, self.request_format, texts, per_request, endpoint=endpoint)

    @property
    def trace_store(self) -> Path:
        return self.options.run_dir / "traces" / "spans.db"

    @property
    def request_format(self) -> str:
        return "kserve" if self.options.stack in DIRECT_TRITON else "serve"

    def groups(self) -> dict[str, int]:
        """The stack's process groups by process name (gateway, triton, ...)."""
        return {spec.name: proc.pid for spec, proc in self.launcher.procs}

    def cpu_seconds(self) -> tuple[float, float]:
        """CPU seconds used so far by (every server process of the stack, the process group receiving requests):
        for STACK=clearml the second is the gateway alone, everything outside Triton."""
        groups = self.groups()
        cpu = groups_cpu_seconds(list(groups.values()))
        per_group = {name: cpu[pgid] for name, pgid in groups.items()}
        front = next((name for name in ("gateway", "fastapi") if name in per_group), "triton")
        return sum(per_group.values()), per_group[front]

    def triton_batches(self) -> tuple[float, float] | None:
        """(sequences, executions) of Triton's encoder so far; None for a stack without Triton."""
        if self.options.stack == "fastapi":
            return None
        import httpx

        text = httpx.get(f"http://127.0.0.1:{self.options.triton_ports.metrics}/metrics", timeout=10).text
        totals = {"nv_inference_count": 0.0, "nv_inference_exec_count": 0.0}
        for line in text.splitlines():
            name = line.split("{", 1)[0]
            if name in totals and 'model="encoder"' in line:
                totals[name] += float(line.rsplit(" ", 1)[1])
        return totals["nv_inference_count"], totals["nv_inference_exec_count"]

    def rss(self) -> dict[str, int]:
        """Resident bytes of every process of the stack, keyed `group/command/pid` (gunicorn's workers, Triton's
        Python-backend stubs each by name)."""
        names = {pgid: name for name, pgid in self.groups().items()}
        found = groups_rss(list(names))
        return {f"{names[group]}/{name}/{pid}": size for pid, (group, name, size) in found.items()}


@contextmanager
def running_stack(
    stack: str,
    model_dir: Path,
    *,
    workers: int = 1,
    batching: bool = True,
    padding: str = "ragged",
    timeout: float = 240,
    traces: bool = False,
    tuning: dict | None = None,
    device: str = "cpu",
    sim_fixed_us: float = DEFAULT_FIXED_US,
    sim_per_token_us: float = DEFAULT_PER_TOKEN_US,
) -> Iterator[RunningStack]:
    """The stack on free ports in a temporary run directory, its encoder on `device` (cpu, or the simulated
    accelerator: sim); with `traces`, its own trace receiver too, tracing only what the load generator samples
    (ratio 0 for requests without a context)."""
    with tempfile.TemporaryDirectory() as run_dir:
        options = StackOptions(
            stack=stack,
            workers=workers,
            batching=batching,
            host="127.0.0.1",
            port=free_port(),
            model_dir=model_dir,
            run_dir=Path(run_dir),
            padding=padding,
            triton_ports=TritonPorts(free_port(), free_port(), free_port()),
            controller_metrics_port=free_port(),
            endpoints_file=Path(run_dir) / "endpoints.json",
            log_json=True,
            traces=traces,
            trace_port=free_port(),
            trace_ratio=0.0,
            tuning=Tuning.of(tuning),
            device=device,
            sim_fixed_us=sim_fixed_us,
            sim_per_token_us=sim_per_token_us,
        )
        launcher = Launcher(Path(run_dir))
        try:
            specs = minimal_processes(options) if stack == "minimal" else stack_processes(options)
            for spec in specs:
                launcher.start_ready(spec, detach=True, timeout=timeout)
            yield RunningStack(options, launcher)
        finally:
            launcher.stop_all()


def minimal_processes(options: StackOptions) -> list[ProcessSpec]:
    """The benchmark's yardstick: the minimal ensemble (`loadtest.minimal`) in the same Triton, its encoder on the
    stack's device (and the stack's trace receiver when traced)."""
    from loadtest.minimal import render

    sim = None
    if options.device == "sim":
        sim = {
            "sim_fixed_us": repr(float(options.sim_fixed_us)),
            "sim_per_token_us": repr(float(options.sim_per_token_us)),
            "sim_lock_file": str(options.sim_lock_file),
        }
    repository = render(options.model_dir, options.run_dir / "minimal-repository", sim)
    triton = triton_process(
        repository,
        options.run_dir,
        options.triton_ports,
        ["tokenizer", "encoder", "ensemble"],
        extra_args=triton_tracing_args(options),
    )
    return ([trace_receiver(options)] if options.traces else []) + [triton]

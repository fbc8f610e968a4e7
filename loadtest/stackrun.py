"""Bring a stack up on free ports for one benchmark measurement, and take it down after: what every benchmark
here shares with `make up` (the same launcher and process specs)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from services.launcher import Launcher, free_port
from services.stacks import StackOptions, stack_processes
from services.triton.server import TritonPorts


@dataclass
class RunningStack:
    options: StackOptions
    launcher: Launcher

    @property
    def base_url(self) -> str:
        """Where the stack's API answers: Triton's HTTP port for STACK=triton, else the API port."""
        port = self.options.triton_ports.http if self.options.stack == "triton" else self.options.port
        return f"http://127.0.0.1:{port}"

    @property
    def request_format(self) -> str:
        return "kserve" if self.options.stack == "triton" else "serve"

    @property
    def front_pid(self) -> int:
        """Process group of the process that receives requests (the gateway for STACK=clearml)."""
        return self.launcher.procs[-1][1].pid


@contextmanager
def running_stack(stack: str, model_dir: Path, *, workers: int = 1, batching: bool = True,
                  padding: str = "ragged", timeout: float = 240) -> Iterator[RunningStack]:
    with tempfile.TemporaryDirectory() as run_dir:
        options = StackOptions(stack=stack, workers=workers, batching=batching, host="127.0.0.1", port=free_port(),
                               model_dir=model_dir, run_dir=Path(run_dir), padding=padding,
                               triton_ports=TritonPorts(free_port(), free_port(), free_port()),
                               endpoints_file=Path(run_dir) / "endpoints.json")
        launcher = Launcher(Path(run_dir))
        try:
            for spec in stack_processes(options):
                launcher.start_ready(spec, detach=True, timeout=timeout)
            yield RunningStack(options, launcher)
        finally:
            launcher.stop_all()

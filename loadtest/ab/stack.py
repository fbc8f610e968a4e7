"""A tree's stack for one step of `loadtest ab`: started by that tree's own `serving up --detach` in a run directory
of its own, on free ports of 127.0.0.1, and stopped by its `serving down`. The load generator reads its processes'
CPU from the pid files `serving up` records there."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from loadtest.ab.trees import Tree, TreeError
from loadtest.matrix.config import RunSpec
from loadtest.stackrun import RunningStack
from services.launcher import free_port
from services.stacks import StackOptions
from services.triton.server import TritonPorts

SUPERVISOR = "supervisor"


class RecordedStack(RunningStack):
    """A stack another command started: its process groups are the pid files in its run directory (the
    supervisor's left out: it serves no request)."""

    def groups(self) -> dict[str, int]:
        found = {}
        for pidfile in self.options.run_dir.glob("*.pid"):
            if pidfile.stem != SUPERVISOR:
                found[pidfile.stem] = int(pidfile.read_text().strip())
        return found

    def working_dirs(self) -> set[Path]:
        """The working directories of the stack's processes: the root whose code their `python -m` imports."""
        return {Path(f"/proc/{pid}/cwd").resolve() for pid in self.groups().values()}


def up_args(spec: RunSpec, options: StackOptions, ready_timeout: float) -> list[str]:
    """`serving up` for the options: on 127.0.0.1, every port given, detached."""
    ports = options.triton_ports
    return [
        "up",
        "--stack",
        spec.stack,
        "--workers",
        str(spec.workers),
        "--batching",
        "on" if spec.batching else "off",
        "--host",
        "127.0.0.1",
        "--port",
        str(options.port),
        "--triton-http-port",
        str(ports.http),
        "--triton-grpc-port",
        str(ports.grpc),
        "--triton-metrics-port",
        str(ports.metrics),
        "--model-dir",
        str(options.model_dir),
        "--endpoints-file",
        str(options.endpoints_path),
        "--detach",
        "--ready-timeout",
        f"{ready_timeout:g}",
    ]


@contextmanager
def tree_stack(
    tree: Tree, spec: RunSpec, model_dir: Path, run_dir: Path, ready_timeout: float = 240
) -> Iterator[RecordedStack]:
    """The tree's stack up for `spec` serving `model_dir`, until the block ends; then down, whatever happened."""
    run_dir = run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    options = StackOptions(
        stack=spec.stack,
        workers=spec.workers,
        batching=spec.batching,
        host="127.0.0.1",
        port=free_port(),
        model_dir=model_dir,
        run_dir=run_dir,
        triton_ports=TritonPorts(free_port(), free_port(), free_port()),
        controller_metrics_port=free_port(),
        endpoints_file=run_dir / "endpoints.json",
    )
    # a variable, not `--controller-metrics-port`: a revision older than that option starts without it
    port = {"CONTROLLER_METRICS_PORT": str(options.controller_metrics_port)}
    try:
        result = tree.serving(
            *up_args(spec, options, ready_timeout), run_dir=run_dir, timeout=ready_timeout + 60, env=port
        )
        if result.returncode != 0:
            raise TreeError(
                f"{tree.name}: `serving up` of {spec.name} failed (exit {result.returncode}); logs in "
                f"{run_dir / 'logs'}:\n{result.stdout[-2000:]}"
            )
        stack = RecordedStack(options, None)
        if stack.working_dirs() != {tree.root.resolve()}:
            found = ", ".join(sorted(map(str, stack.working_dirs())))
            raise TreeError(f"{tree.name}'s stack runs in {found}, not in its tree {tree.root}")
        yield stack
    finally:
        down = tree.serving("down", run_dir=run_dir, timeout=300)
        if down.returncode != 0:
            raise TreeError(f"{tree.name}: `serving down` in {run_dir} failed: {down.stdout[-1000:]}")

"""A stack for the benchmark driver, the tuning and the overload test: brought up on free ports with the launcher
and process specs `make up` use, measured only once every process has finished starting, its processes' CPU and
resident memory read from /proc, the batches Triton formed read from its metrics, and taken down.

Finished starting (`RunningStack.settle`): a process can be ready and still be starting. The lifecycle controller is
ready as soon as it runs (it serves no port), then spends seconds of CPU importing MLflow and creating the
registry's tables, and its first loop turns still add a sixth to its resident memory
(docs/decisions/settled-stack.md). A stack is settled once every process of it is mostly asleep over a window: its
threads ran or waited for a CPU less than half of it (a process that is starting wants a CPU all the time, on a busy
machine too, where it waits for one) and its resident memory moved by less than 1%."""

from __future__ import annotations

import os
import tempfile
import time
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


SETTLE_WINDOW = 2.0
"""Seconds over which each process of a settled stack is mostly asleep (its idle loops wake every second or less)."""
SETTLED_BUSY = 0.5
"""The most of the window a settled process's threads may have run or waited to run, together."""
SETTLED_GROWTH = 0.01
"""The most a settled process's resident memory may move over the window."""


def groups_activity(pgids: list[int]) -> dict[int, tuple[dict[int, int], int]]:
    """Every live process of the process groups: pid -> (nanoseconds each of its threads has run or waited to run so
    far, by thread id, from /proc/<pid>/task/<tid>/schedstat; resident bytes)."""
    activity = {}
    for pid, (_, _, rss) in groups_rss(pgids).items():
        threads = {}
        for stat in Path(f"/proc/{pid}/task").glob("[0-9]*/schedstat"):
            try:
                ran, waited = stat.read_text().split()[:2]
            except (OSError, ValueError):
                continue  # the thread ended
            threads[int(stat.parent.name)] = int(ran) + int(waited)
        activity[pid] = (threads, rss)
    return activity


def still_starting(
    before: dict[int, tuple[dict[int, int], int]], after: dict[int, tuple[dict[int, int], int]], seconds: float
) -> dict[int, tuple[float, float]]:
    """The processes present at both readings, `seconds` apart, that were not mostly asleep between them: pid ->
    (the share of the time its threads ran or waited to run, its resident memory's relative growth)."""
    busy = {}
    for pid in before.keys() & after.keys():
        (threads, rss), (threads_after, rss_after) = before[pid], after[pid]
        share = sum(threads_after[t] - threads[t] for t in threads.keys() & threads_after.keys()) / (seconds * 1e9)
        growth = rss_after / rss - 1 if rss else 0.0
        if share >= SETTLED_BUSY or abs(growth) >= SETTLED_GROWTH:
            busy[pid] = (share, growth)
    return busy


@dataclass
class RunningStack:
    options: StackOptions
    launcher: Launcher | None
    """What started the processes here; None for a stack another command started (`loadtest.ab.stack`)."""
    protocol: str = "http"
    """How `targets` reach the stack: http, or grpc (the gateway's Open Inference Protocol, on `options.grpc_port`)."""

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
        base = f"grpc://127.0.0.1:{self.options.grpc_port}" if self.protocol == "grpc" else self.base_url
        return build_targets(base, self.request_format, texts, per_request, endpoint=endpoint)

    @property
    def trace_store(self) -> Path:
        return self.options.run_dir / "traces" / "spans.db"

    @property
    def request_format(self) -> str:
        if self.protocol == "grpc":
            return "grpc"
        return "kserve" if self.options.stack in DIRECT_TRITON else "serve"

    def groups(self) -> dict[str, int]:
        """The stack's process groups by process name (gateway, triton, ...)."""
        if self.launcher is None:  # a stack another command started reads them elsewhere (`RecordedStack`)
            raise NotImplementedError("a stack started elsewhere names its process groups itself")
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

    def settle(self, timeout: float = 240, window: float = SETTLE_WINDOW) -> float:
        """Wait until every process of the stack has finished starting (mostly asleep over `window` seconds, its
        memory steady); returns the seconds waited. RuntimeError naming the processes still busy after `timeout`."""
        start = time.monotonic()
        names = {pgid: name for name, pgid in self.groups().items()}
        while True:
            before, began = groups_activity(list(names)), time.monotonic()
            time.sleep(window)
            after, ended = groups_activity(list(names)), time.monotonic()
            busy = still_starting(before, after, ended - began)
            if not busy:
                return ended - start
            if ended - start > timeout:
                groups = groups_rss(list(names))
                described = "; ".join(
                    f"{names[groups[pid][0]]} (pid {pid}) ran or waited to run {share:.0%} of the last "
                    f"{ended - began:.1f} s, its memory {growth:+.1%}"
                    for pid, (share, growth) in busy.items()
                    if pid in groups
                )
                raise RuntimeError(f"the stack had not finished starting {timeout:g} s after it was ready: {described}")

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
    protocol: str = "http",
) -> Iterator[RunningStack]:
    """The stack on free ports in a temporary run directory, its encoder on `device` (cpu, or the simulated
    accelerator: sim), every process ready and settled (`RunningStack.settle`, within `timeout` too); with `traces`,
    its own trace receiver too, tracing only what the load generator samples (ratio 0 for requests without a
    context). With `protocol` grpc (STACK=clearml only) the gateway serves gRPC on a free port too, and the stack's
    `targets` go there."""
    if protocol not in ("http", "grpc"):
        raise ValueError(f"protocol must be http or grpc, not '{protocol}'")
    if protocol == "grpc" and stack != "clearml":
        raise ValueError(f"protocol grpc is for stack clearml only (the gateway's gRPC edge), not stack '{stack}'")
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
            # over HTTP none: on 8081 it would share a user's stack's gRPC port (SO_REUSEPORT)
            grpc_port=free_port() if protocol == "grpc" else 0,
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
            running = RunningStack(options, launcher, protocol)
            running.settle(timeout)
            yield running
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
    repository = render(options.model_dir, options.run_dir / "minimal-repository", sim, options.tuning.given())
    triton = triton_process(
        repository,
        options.run_dir,
        options.triton_ports,
        ["tokenizer", "encoder", "ensemble"],
        extra_args=triton_tracing_args(options),
    )
    return ([trace_receiver(options)] if options.traces else []) + [triton]

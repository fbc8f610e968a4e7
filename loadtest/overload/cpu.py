"""The CPU a stack could use during a phase of the overload, on a machine it shares.

A verdict on goodput or latency is a verdict on the stack only if the stack had the CPU it needed: on a shared
machine (other test runs, the load generator itself, a hypervisor's other guests) a stack short of CPU serves less
and slower for reasons not its own (docs/decisions/measured-defaults.md). So each phase is bracketed by two
readings: the CPU time of the stack's processes (every process of its process groups, with the children they
waited for, from /proc/<pid>/stat), of this process (the load generator) and of the whole machine by kind
(/proc/stat: busy, idle, steal). Between two readings:

- `stack`: CPUs the stack used;
- `harness`: CPUs the load generator used (this process and the ones it waited for);
- `others`: CPUs busy in everything else (other processes, the kernel's interrupts);
- `steal`: CPUs the hypervisor gave to other guests while this one wanted them;
- `idle`: CPUs nobody used;
- `available`: what the stack used plus what sat idle (capped by the CPUs this machine or its cgroup allows). Idle
  CPU counts as available on purpose: a stack that stalls and leaves the CPU idle is not excused by it, only one
  whose CPU was taken by others.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from loadtest.stackrun import RunningStack

_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
"""The first eight columns of /proc/stat's `cpu` line (guest time is already inside user and nice)."""


@dataclass(frozen=True)
class CpuReading:
    """CPU seconds used so far, read at one moment."""

    when: float
    """time.monotonic() of the reading."""
    stack: float
    """Every server process of the stack."""
    front: float
    """The process group that receives the requests (the gateway for STACK=clearml)."""
    harness: float
    """This process (the load generator) and its waited-for children."""
    machine: dict[str, float]
    """/proc/stat's `cpu` line, seconds per kind (all CPUs together)."""


@dataclass(frozen=True)
class PhaseCpu:
    """CPUs (CPU seconds per second of the phase) by who had them, between two readings."""

    seconds: float
    limit: float
    """CPUs this machine (or its cgroup's quota) allows."""
    stack: float
    harness: float
    others: float
    steal: float
    idle: float
    available: float
    """What the stack used plus what sat idle, at most `limit`."""

    def describe(self) -> str:
        return (
            f"the stack {self.stack:.2f} CPUs (could use {self.available:.2f} of {self.limit:g}), "
            f"the load generator {self.harness:.2f}, others {self.others:.2f}, steal {self.steal:.2f}, "
            f"idle {self.idle:.2f}"
        )


def parse_proc_stat(text: str) -> dict[str, float]:
    """Seconds per kind from /proc/stat's aggregate `cpu` line."""
    ticks = os.sysconf("SC_CLK_TCK")
    line = next(line for line in text.splitlines() if line.startswith("cpu "))
    values = [int(v) for v in line.split()[1:]] + [0] * len(_FIELDS)  # old kernels: fewer columns
    return {name: values[i] / ticks for i, name in enumerate(_FIELDS)}


def phase_cpu(start: CpuReading, end: CpuReading, limit: float) -> PhaseCpu:
    """Who had the CPU between two readings (a pure function of them)."""
    seconds = max(end.when - start.when, 1e-9)

    def rate(kinds: tuple[str, ...]) -> float:
        return sum(end.machine[k] - start.machine[k] for k in kinds) / seconds

    stack = (end.stack - start.stack) / seconds
    harness = (end.harness - start.harness) / seconds
    busy = rate(("user", "nice", "system", "irq", "softirq"))
    idle = rate(("idle", "iowait"))
    return PhaseCpu(
        seconds=seconds,
        limit=limit,
        stack=stack,
        harness=harness,
        others=max(busy - stack - harness, 0.0),
        steal=rate(("steal",)),
        idle=idle,
        available=min(stack + idle, limit),
    )


def goodput_share(saturation: PhaseCpu, overload: PhaseCpu) -> float:
    """The CPU the stack could use during the overload as a fraction of what it used to reach its saturated rate
    (at most 1: more CPU than it used at saturation is not more capacity it has shown). The goodput bar, a fraction
    of that rate, scales with it."""
    if saturation.stack <= 0:
        return 1.0
    return min(overload.available / saturation.stack, 1.0)


def latency_share(overload: PhaseCpu) -> float:
    """The CPU the stack could use during the overload as a fraction of what it would have had alone on this
    machine with its load generator (the CPUs less the generator's). The p99 bound is absolute, set for a stack
    with its machine; by Little's law (the same in-flight bound over a proportionally lower rate) it grows as 1 /
    this share. Not relative to the saturated phase: neighbours may have starved that one too."""
    alone = overload.limit - overload.harness
    return min(overload.available / alone, 1.0) if alone > 0 else 1.0


def cpu_limit() -> float:
    """CPUs this process may use: its cgroup's quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us`) when one is set, else
    the CPUs it may run on."""
    cpus = float(len(os.sched_getaffinity(0)))
    for quota_file, period_file in (
        ("/sys/fs/cgroup/cpu.max", None),
        ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us"),
    ):
        try:
            words = Path(quota_file).read_text().split()
            if period_file:
                words.append(Path(period_file).read_text().strip())
        except OSError:
            continue
        if words[0] not in ("max", "-1"):
            return min(cpus, int(words[0]) / int(words[1]))
    return cpus


def read(stack: RunningStack) -> CpuReading:
    """One reading of the stack's, this process's and the machine's CPU time."""
    stack_total, front = stack.cpu_seconds()
    times = os.times()
    return CpuReading(
        when=time.monotonic(),
        stack=stack_total,
        front=front,
        harness=times.user + times.system + times.children_user + times.children_system,
        machine=parse_proc_stat(Path("/proc/stat").read_text()),
    )

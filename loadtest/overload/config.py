"""What `loadtest overload` and `loadtest soak` do (the stack, the phases and their lengths) and what passes."""

from __future__ import annotations

from dataclasses import dataclass

SHED_CODES = (429, 503)
"""The refusals a stack past its capacity may answer with (each with Retry-After)."""


@dataclass
class OverloadConfig:
    stack: str = "clearml"
    workers: int = 2
    batching: bool = True
    concurrency: int = 32
    """Closed-loop workers that measure the saturated rate (before and after)."""
    warmup_seconds: float = 2.0
    saturate_seconds: float = 10.0
    factor: float = 3.0
    """Offered load during the overload, as a multiple of the saturated rate."""
    overload_seconds: float = 60.0
    settle_seconds: float = 10.0
    """Memory is compared with its value this far into the overload: the open loop holds hundreds of connections
    at once, each with its server-side buffers, and reaching that peak takes the first seconds, after which the
    workers' memory stays flat (docs/decisions/measured-defaults.md)."""
    recovery_seconds: float = 10.0
    """Closed loop right after the overload, in which the throughput must come back."""
    soak_seconds: float = 0.0
    """0: no soak."""
    soak_fraction: float = 0.7
    """Soak rate as a fraction of the saturated rate."""
    soak_bin_seconds: float = 30.0
    """Width of one row of the soak's timeline (and its chart)."""
    procs: int = 2
    """Generator processes for the open-loop phases. One falls behind at 3x a 2-worker stack's saturated rate here
    (1,500-1,800 req/s, most of a core): requests then go out late, their lag counts in their latency from their due
    time, and the admitted p99 measured the generator (a fresh clone's run: 3.2 s, the stack idle 21% of the time)."""
    # What passes: the production bar.
    min_goodput_ratio: float = 0.85
    """Goodput during the overload against the saturated rate, both per CPU the stack could use (`cpu`)."""
    max_rss_growth: float = 0.10
    max_recovery_seconds: float = 5.0
    admitted_p99_bound_ms: float = 2000.0
    """For a stack that has the CPU its load generator leaves on this machine; with less, the bound grows as 1 / the
    share it could use (Little's law: the same in-flight bound served at a proportionally lower rate)."""
    min_cpu_share: float = 0.25
    """The goodput bar and the p99 bound are scaled by the stack's CPU share down to this floor and no further:
    below it the run says too little about the stack to excuse it."""

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
    at once, each with its server-side buffers, and reaching that peak takes the first seconds (measured: the
    gateway's workers grow by ~60 MB each within 4 s, then stay flat)."""
    recovery_seconds: float = 10.0
    """Closed loop right after the overload, in which the throughput must come back."""
    soak_seconds: float = 0.0
    """0: no soak."""
    soak_fraction: float = 0.7
    """Soak rate as a fraction of the saturated rate."""
    soak_bin_seconds: float = 30.0
    """Width of one row of the soak's timeline (and its chart)."""
    procs: int = 1
    """Generator processes for the open-loop phases."""
    # What passes: the production bar.
    min_goodput_ratio: float = 0.85
    max_rss_growth: float = 0.10
    max_recovery_seconds: float = 5.0
    admitted_p99_bound_ms: float = 2000.0

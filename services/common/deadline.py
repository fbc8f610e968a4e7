"""The deadline of the request being served, where every stage that waits can read it.

The HTTP edge (`services.api.lifetime`) sets it from the caller's timeout header or the server's default; what waits
on the request's behalf bounds its wait by what is left: the token budget's queue (`services.api.budget`) and the
Triton call, whose gRPC deadline is the time left (`services.triton.grpc_client`), so Triton drops a request whose
caller has given up instead of running it. A context variable, because the request's task and the tasks it starts
(a coalesced batch runs in its carrier's context) carry it without passing it through every signature.
"""

from __future__ import annotations

import time
from contextvars import ContextVar

deadline_var: ContextVar[float | None] = ContextVar("deadline", default=None)
"""`time.monotonic()` at which the current request's caller stops waiting; None: no deadline."""


def time_left(cap: float) -> float:
    """Seconds until the current request's deadline, at most `cap` (a stage's own timeout); `cap` without one.
    Never below zero: a caller past its deadline gets 0 and its wait ends at once."""
    deadline = deadline_var.get()
    if deadline is None:
        return cap
    return max(0.0, min(cap, deadline - time.monotonic()))

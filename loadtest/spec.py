"""What an attack is asked to do (rate or concurrency, how long, how many) and what the generator learns about
itself while doing it (did it keep to its schedule, was its own CPU the limit), shared by every engine (the
built-in one, `ab`, Vegeta)."""

from __future__ import annotations

from dataclasses import dataclass

from loadtest.targets import Target
from loadtest.tracing import ClientTracing


@dataclass
class AttackSpec:
    targets: list[Target]
    rate: float | None = None
    """Requests per second (open loop). None: closed loop with `concurrency` workers."""
    concurrency: int = 8
    duration: float | None = 10.0
    requests: int | None = None
    """Stop after this many requests (instead of, or before, `duration`)."""
    timeout: float = 30.0
    max_inflight: int = 10_000
    """Open loop: requests outstanding at once before the generator records them as failed (it never waits)."""
    name: str = ""
    tracing: ClientTracing | None = None
    """Which requests start a sampled W3C trace (a `traceparent` header), so a trace runs from the generator through
    the gateway into Triton; with an endpoint, each sampled request's client span goes there."""

    def total(self) -> int | None:
        """Requests the attack will send: known for an open loop (the sooner of `duration` and `requests`), and
        for a closed loop only when `requests` is given (None: until `duration` ends)."""
        if self.rate is not None:
            by_time = int(self.rate * self.duration) if self.duration else None
            return min(x for x in (by_time, self.requests) if x is not None)
        return self.requests


@dataclass
class AttackStats:
    """What the generator knows about itself: did it keep to its schedule, was its CPU the limit?"""

    sent: int = 0
    first_send: float = 0.0
    last_send: float = 0.0
    max_lag: float = 0.0
    cpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    dropped: int = 0

    @property
    def achieved_rate(self) -> float:
        """Requests sent per second between the first and the last send."""
        span = self.last_send - self.first_send
        return (self.sent - 1) / span if self.sent > 1 and span > 0 else float(self.sent)

    def ended_by(self, spec: AttackSpec) -> str:
        """Which limit ended the attack, for the report."""
        if spec.requests is not None and self.sent >= spec.requests:
            return f"--requests {spec.requests} (all sent)"
        if spec.duration is not None:
            return f"--duration {spec.duration:g}s ({self.sent} requests sent)"
        return f"{self.sent} requests sent"

    @property
    def cpu_busy(self) -> float:
        return self.cpu_seconds / self.wall_seconds if self.wall_seconds else 0.0

    def merge(self, other: AttackStats) -> AttackStats:
        """The stats of one attack split across processes: counts and CPU added, the worst lag, the longest wall."""
        return AttackStats(
            sent=self.sent + other.sent,
            first_send=min((x for x in (self.first_send, other.first_send) if x), default=0.0),
            last_send=max(self.last_send, other.last_send),
            max_lag=max(self.max_lag, other.max_lag),
            cpu_seconds=self.cpu_seconds + other.cpu_seconds,
            wall_seconds=max(self.wall_seconds, other.wall_seconds),
            dropped=self.dropped + other.dropped,
        )


def warnings_for(spec: AttackSpec, stats: AttackStats, processes: int = 1) -> list[str]:
    """The loud warnings: the generator fell behind its schedule, its own CPU was the limit, or it did not send
    requests because too many were outstanding."""
    notes = []
    if spec.rate is not None and stats.sent > 1 and stats.achieved_rate < 0.99 * spec.rate:
        notes.append(
            f"the generator fell behind: it sent {stats.achieved_rate:.1f} req/s of the {spec.rate:g} "
            f"asked (worst lag {stats.max_lag * 1000:.0f} ms); use --procs or a lower rate"
        )
    if stats.cpu_busy > 0.9 * processes:
        notes.append(f"the generator used {stats.cpu_busy:.0%} of {processes} CPU(s): its own CPU may be the limit")
    if stats.dropped:
        notes.append(f"{stats.dropped} requests were not sent: more than the in-flight limit were outstanding")
    return notes

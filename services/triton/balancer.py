"""Which Triton replica a gateway worker sends each call to (`least_work`), and which replicas are out of rotation
(outlier ejection). Pure policy: the clock and the calls' outcomes are passed in; the channels are `grpc_client`'s.

Picking: each replica's cost is `(recent sequences + this call's) x slowness`, the cheapest wins (ties at random).
- Recent sequences: the sequences this worker sent it, decayed with a half-life of `LOAD_HALF_LIFE` seconds, so
  sequences, not calls, are spread: a coalesced batch of 30 weighs 30 singles.
- Slowness: how long its calls took against what calls of that size usually take (`expected`, per power-of-two
  size, learnt from every replica but slow outliers, each call counting for at most `OUTLIER` times it), as a
  peak-sensitive EWMA (a slower call counts at once, faster ones bring it down gradually): a replica twice as slow
  as another gets about half as many sequences. A call outstanding longer than its size's `expected` counts at once
  (a stalled replica). It fades back to 1 with a half-life of `SLOWNESS_HALF_LIFE` seconds.
- Slow outliers: a replica more than `OUTLIER` times slower than the least slow one gets no calls (a gateway worker
  waits on its batch: one call there would set the fleet's p99) until it is no more than `RECOVERED` times slower.
  A copy of a call is sent to it now and then (`shadow`), no caller waiting on it, and its time shows when it has
  recovered.

Ejection (as Envoy's and gRPC's outlier detection): a replica whose call failed is out of rotation for `base`
seconds, doubled for each ejection in a row (a failure within `longest` seconds of the last ejection's end) up to
`longest`; then one call probes it (no other call goes to it meanwhile), and a success puts it back. What counts as
a failure is the caller's to say: `grpc_client` charges a lost connection at once, INTERNAL and NOT_FOUND only once
the same call succeeded on another replica, so a request that fails everywhere ejects nobody. NOT_FOUND ejects the
replica for that model only. While every replica is out, all are used.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

Policy = Literal["least_work", "round_robin"]
DEFAULT_POLICY: Policy = "least_work"
"""`least_work`: this module; `round_robin`: gRPC's own policy over one channel (every call to the next replica)."""

REASONS = ("unavailable", "internal", "not_found", "slow")
"""Why a replica is out of rotation: its connection lost (UNAVAILABLE, not a full queue; CANCELLED by the server),
INTERNAL where another replica answered the same call, a model it lacks while another replica has it, or a slow
outlier (`OUTLIER`)."""

LOAD_HALF_LIFE = 1.0
SLOWNESS_HALF_LIFE = 5.0
SLOWNESS_WEIGHT = 0.3  # of each new sample below a replica's slowness
EXPECTED_WEIGHT = 0.1  # of each new sample in the fleet's expected time for a size
SLOWNESS_RANGE = (0.1, 100.0)
OUTLIER = 3.0
"""A replica this much slower than the least slow one is a slow outlier: no calls, shadow probes; its calls teach
no replica's `expected`."""
RECOVERED = 1.5
"""A slow outlier rejoins once no more than this much slower than the least slow replica."""
SHADOW_EVERY = 0.5
"""Seconds between copies of calls sent to a slow outlier (`Balancer.shadow`)."""


@dataclass
class Call:
    """One call on its way to `address`: what `start` gave, what `succeeded`/`failed`/`abandoned` take back."""

    address: str
    size: int
    model: str
    started: float
    shadow: bool = False  # a copy no caller waits on (`Balancer.shadow`)


@dataclass
class Ejection:
    reason: str
    since: float
    until: float
    count: int  # ejections in a row without a call answered since
    probing: bool = False


@dataclass
class Replica:
    address: str
    load: float = 0.0
    load_at: float = 0.0
    slowness: float = 1.0
    slowness_at: float = 0.0
    calls: dict[int, Call] = field(default_factory=dict)  # in flight, by id()
    slow: bool = False  # a slow outlier: no calls, shadow probes only
    shadow_at: float = float("-inf")


Listener = Callable[[str, str, bool], None]
"""Told (address, reason, ejected) whenever a replica leaves or rejoins the rotation: the metrics and the log."""


class Balancer:
    def __init__(
        self,
        addresses: Iterable[str],
        *,
        clock: Callable[[], float],
        base: float = 1.0,
        longest: float = 30.0,
        rng: random.Random | None = None,
        listener: Listener | None = None,
    ):
        self.clock, self.base, self.longest = clock, base, longest
        self.rng = rng or random.Random()
        self.listener = listener or (lambda address, reason, ejected: None)
        self.replicas: dict[str, Replica] = {}
        self.ejections: dict[tuple[str, str], Ejection] = {}  # (address, model or "" for every model)
        self.rejoined: dict[tuple[str, str], Ejection] = {}  # the last ejection of each, its `until` when it ended
        self.expected: dict[int, float] = {}  # seconds a call took, by size.bit_length(), over every replica
        self.set_addresses(addresses)

    def set_addresses(self, addresses: Iterable[str]) -> None:
        """The replicas now (a name resolved again): new ones start fresh, gone ones leave with their ejections."""
        wanted = list(dict.fromkeys(addresses))
        for address in set(self.replicas) - set(wanted):
            if self.replicas.pop(address).slow:
                self.listener(address, "slow", False)
            for key in [key for key in self.ejections if key[0] == address]:
                self._rejoin(key)
        for address in wanted:
            self.replicas.setdefault(address, Replica(address, load_at=self.clock(), slowness_at=self.clock()))

    def start(self, size: int, model: str, exclude: Iterable[str] = ()) -> Call:
        """The replica for a call of `size` sequences to `model`, not one of `exclude` while another exists."""
        now = self.clock()
        candidates = [r for r in self.replicas.values() if r.address not in set(exclude)] or list(
            self.replicas.values()
        )
        probes = [r for r in candidates if self._probe_due(r.address, model, now)]
        if probes:
            replica = self.rng.choice(probes)
            for key in self._keys(replica.address, model):
                if key in self.ejections:
                    self.ejections[key].probing = True
        else:
            self._mark_slow(now)
            healthy = [r for r in candidates if not self._ejected(r.address, model)]
            serving = [r for r in healthy if not r.slow] or healthy or candidates
            costs = [(self._load(r, now) + size) * self._slowness(r, now) for r in serving]
            least = min(costs)
            replica = self.rng.choice([r for r, cost in zip(serving, costs, strict=True) if cost == least])
        replica.load = self._load(replica, now) + size
        replica.load_at = now
        call = Call(replica.address, size, model, now)
        replica.calls[id(call)] = call
        return call

    def shadow(self, size: int, model: str) -> Call | None:
        """Where to send a copy of a call (`size` sequences to `model`) that no caller waits on: a slow outlier, at
        most one copy in flight and one every `SHADOW_EVERY` seconds per replica, so its time shows when the replica
        recovered. None when no replica is slow or none is due."""
        now = self.clock()
        for replica in self.replicas.values():
            due = now - replica.shadow_at >= SHADOW_EVERY and not any(call.shadow for call in replica.calls.values())
            if replica.slow and due and not self._ejected(replica.address, model):
                replica.shadow_at = now
                call = Call(replica.address, size, model, now, shadow=True)
                replica.calls[id(call)] = call
                return call
        return None

    def succeeded(self, call: Call) -> None:
        """`call` answered: its time teaches the replica's slowness, and a call sent since its ejection (the probe, or
        any while every replica was out) puts the replica back."""
        now = self.clock()
        replica = self._end(call)
        seconds = max(now - call.started, 1e-6)
        bucket = call.size.bit_length()
        expected = self.expected.setdefault(bucket, seconds)
        if replica is None or not replica.slow:  # winsorized: one slow call moves it little
            self.expected[bucket] = expected + EXPECTED_WEIGHT * (min(seconds, OUTLIER * expected) - expected)
        if replica is not None:
            slowness = self._slowness_now(replica, now)
            low, high = SLOWNESS_RANGE
            sample = seconds / expected  # at once when slower (a peak-sensitive EWMA, as Finagle's and Linkerd's)
            slowness = sample if sample > slowness else slowness + SLOWNESS_WEIGHT * (sample - slowness)
            replica.slowness = min(high, max(low, slowness))
            replica.slowness_at = now
        for key in self._keys(call.address, call.model):
            if key in self.ejections and call.started >= self.ejections[key].since:
                self._rejoin(key)

    def failed(self, call: Call, reason: str) -> None:
        """`call` failed for `reason` (one of REASONS) on its replica: out of rotation for a growing time."""
        self._end(call)
        key = (call.address, call.model if reason == "not_found" else "")
        now = self.clock()
        before = self.ejections.get(key) or self.rejoined.get(key)
        count = before.count + 1 if before is not None and now - before.until < self.longest else 1
        self.ejections[key] = Ejection(reason, now, now + min(self.longest, self.base * 2 ** (count - 1)), count)
        self.listener(call.address, reason, True)

    def abandoned(self, call: Call) -> None:
        """`call` ended with no verdict on its replica (a full queue, a deadline, bad input, a caller gone)."""
        self._end(call)
        for key in self._keys(call.address, call.model):
            if key in self.ejections:
                self.ejections[key].probing = False  # probe again with the next call

    def ejected(self) -> dict[str, str]:
        """Replicas out of rotation now (for every model or one, or slow), with why."""
        slow = {address: "slow" for address, replica in self.replicas.items() if replica.slow}
        return slow | {address: ejection.reason for (address, _), ejection in self.ejections.items()}

    def _end(self, call: Call) -> Replica | None:
        replica = self.replicas.get(call.address)
        if replica is not None:
            replica.calls.pop(id(call), None)
        return replica

    def _rejoin(self, key: tuple[str, str]) -> None:
        ejection = self.ejections.pop(key)
        self.rejoined[key] = Ejection(ejection.reason, ejection.since, self.clock(), ejection.count)
        self.listener(key[0], ejection.reason, False)

    @staticmethod
    def _keys(address: str, model: str) -> tuple[tuple[str, str], ...]:
        return ((address, ""), (address, model))

    def _ejected(self, address: str, model: str) -> bool:
        return any(key in self.ejections for key in self._keys(address, model))

    def _probe_due(self, address: str, model: str, now: float) -> bool:
        found = [self.ejections[key] for key in self._keys(address, model) if key in self.ejections]
        return bool(found) and all(e.until <= now and not e.probing for e in found)

    def _mark_slow(self, now: float) -> None:
        """Mark the slow outliers: slower than `OUTLIER` times the least slow replica (counting calls held now), until
        no slower than `RECOVERED` times it."""
        slowness = {address: self._slowness(r, now) for address, r in self.replicas.items()}
        least = min(slowness.values())
        for address, replica in self.replicas.items():
            slow = len(slowness) > 1 and slowness[address] > (RECOVERED if replica.slow else OUTLIER) * least
            if slow != replica.slow:
                replica.slow = slow
                self.listener(address, "slow", slow)

    def _load(self, replica: Replica, now: float) -> float:
        return replica.load * 0.5 ** ((now - replica.load_at) / LOAD_HALF_LIFE)

    def _slowness_now(self, replica: Replica, now: float) -> float:
        fade = 0.5 ** ((now - replica.slowness_at) / SLOWNESS_HALF_LIFE)
        return 1.0 + (replica.slowness - 1.0) * fade

    def _slowness(self, replica: Replica, now: float) -> float:
        """Its slowness, or as slow as its longest-outstanding call shows if that is slower."""
        slowness = self._slowness_now(replica, now)
        for call in replica.calls.values():
            expected = self.expected.get(call.size.bit_length())
            if expected is not None:
                slowness = max(slowness, (now - call.started) / expected)
        return slowness

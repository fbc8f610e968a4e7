"""Which Triton replica a gateway worker sends each call to (`least_work`), and which replicas are out of rotation
(outlier ejection). Pure policy: the clock and the calls' outcomes are passed in; the channels are `grpc_client`'s.

Picking: each replica's cost is `(recent sequences + this call's) x slowness`, the cheapest wins (ties at random).
- Recent sequences: the sequences this worker sent it, decayed with a half-life of `LOAD_HALF_LIFE` seconds, so
  sequences, not calls, are spread: a coalesced batch of 30 weighs 30 singles.
- Slowness: how long its calls took against what calls of that size usually take (`expected`, per power-of-two
  size, learnt from every replica but slow outliers, each call counting for at most `OUTLIER` times it), as a
  peak-sensitive EWMA (a slower call counts at once, faster ones bring it down gradually): a replica twice as slow
  as another gets about half as many sequences. `JITTER` is added to both times, so a late answer from a model
  that takes milliseconds is not slowness (and with calls much shorter than it, a slower replica keeps more than
  that share). A call outstanding longer than its size's `expected` counts at once
  (a stalled replica). It fades back to 1 with a half-life of `SLOWNESS_HALF_LIFE` seconds.
- Slow outliers: a replica more than `OUTLIER` times slower than the least slow one gets no calls (a gateway worker
  waits on its batch: one call there would set the fleet's p99) until it is no more than `RECOVERED` times slower.
  Slower by its slowness, or by its steady ratio: an EWMA of its calls' plain time ratios (no `JITTER`, each call
  counting for at most `STEADY_CAP`), so that a fast model's replica slower call after call is left out though
  `JITTER` keeps its slowness low, while one late answer moves it little.
  Copies of calls are sent to it (`shadow`), no caller waiting on them, one at a time, an equal share of the
  worker's sequences, so its times show whether it can carry that work again, not only answer one lone call (a
  replica held to a tenth of a core does that at the usual speed, and buckled each time it rejoined). With no
  replica left in rotation, the slow ones get the calls themselves and no copies.
- Hedging (as in "The Tail at Scale"): a call still unanswered `HEDGE_AFTER` times its size's usual time gets a copy
  on another replica in rotation (`hedge`), and the first answer wins, so a replica not yet known to be slow holds
  its worker's batch for about that long, not for its whole call. Copies are at most `HEDGE_BUDGET` of the calls. A
  replica holding a call that was copied gets no new call until that call ends.
- Back in rotation (recovered, or its ejection over), a replica counts as much recent work as the others' average,
  so it is not the cheapest for every call until its own count catches up.

Ejection (as Envoy's and gRPC's outlier detection): a replica whose call failed is out of rotation for `base`
seconds, doubled for each ejection in a row (a failure within `longest` seconds of the last ejection's end) up to
`longest`; then one call probes it (no other call goes to it meanwhile), and a success puts it back. Calls sent
before its ejection ran its time (every replica out) fail without counting. What counts as
a failure is the caller's to say: `grpc_client` charges a lost connection at once, INTERNAL and NOT_FOUND only once
the same call succeeded on another replica, so a request that fails everywhere ejects nobody. NOT_FOUND ejects the
replica for that model only, and only calls to that model probe it, so such an ejection no call probed for `longest`
seconds after its end is over (the model no longer called: a version drained and unloaded). While every replica is
out, all are used.
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
STEADY_WEIGHT = 0.1  # of each new plain sample in a replica's steady ratio (`Replica.steady`)
STEADY_CAP = 6.0
"""The most one call counts for in a replica's steady ratio: a stall moves it little, a replica slower call after
call gets there in a few calls."""
OUTLIER = 3.0
"""A replica this much slower than the least slow one is a slow outlier: no calls, shadow copies; its calls teach
no replica's `expected`."""
RECOVERED = 1.5
"""A slow outlier rejoins once no more than this much slower than the least slow replica."""
HEDGE_AFTER = 2.0
"""A call unanswered this many times its size's usual time (`expected`), `JITTER` added to both, gets a copy on
another replica: twice the usual time plus `JITTER`."""
HEDGE_BUDGET = 0.05
"""Hedged copies are at most this share of calls: each call earns this much of a copy, up to `HEDGE_BURST` copies."""
HEDGE_BURST = 3.0
JITTER = 0.025
"""Seconds of delay any call may meet on a busy host (a scheduler's turn, a pause) that say nothing about its replica:
added to a call's time and to its size's usual time before one is held against the other, so a model that answers
in a few milliseconds is not called slow for one late answer."""


@dataclass
class Call:
    """One call on its way to `address`: what `start` gave, what `succeeded`/`failed`/`abandoned` take back."""

    address: str
    size: int
    model: str
    started: float
    shadow: bool = False  # a copy no caller waits on (`Balancer.shadow`)
    hedged: bool = False  # a copy of it went to another replica (`Balancer.hedge`)


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
    steady: float = 1.0  # an EWMA of its calls' plain time ratios (no `JITTER`), each capped at `STEADY_CAP`
    slowness_at: float = 0.0  # when `slowness` and `steady` were last updated (both fade from then)
    calls: dict[int, Call] = field(default_factory=dict)  # in flight, by id()
    slow: bool = False  # a slow outlier: no calls, shadow copies only
    credit: float = 0.0  # sequences of copies it is owed while slow (`Balancer.shadow`)

    def holds_hedged(self) -> bool:
        """Whether a call of its was copied elsewhere and has not ended: no new call goes to it meanwhile."""
        return any(call.hedged for call in self.calls.values())


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
        jitter: float = JITTER,
    ):
        self.clock, self.base, self.longest, self.jitter = clock, base, longest, jitter
        self.rng = rng or random.Random()
        self.listener = listener or (lambda address, reason, ejected: None)
        self.replicas: dict[str, Replica] = {}
        self.ejections: dict[tuple[str, str], Ejection] = {}  # (address, model or "" for every model)
        self.rejoined: dict[tuple[str, str], Ejection] = {}  # the last ejection of each, its `until` when it ended
        self.expected: dict[int, float] = {}  # seconds a call took, by size.bit_length(), over every replica
        self.hedges = HEDGE_BURST  # copies `hedge` may send now (`HEDGE_BUDGET`)
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
            self._expire(now)
            self._mark_slow(now)
            healthy = [r for r in candidates if not self._ejected(r.address, model)]
            serving = [r for r in healthy if not r.slow] or healthy or candidates
            replica = self._cheapest([r for r in serving if not r.holds_hedged()] or serving, size, now)
        self.hedges = min(HEDGE_BURST, self.hedges + HEDGE_BUDGET)
        return self._send(replica, size, model, now)

    def hedge_after(self, call: Call) -> float | None:
        """Seconds to wait on `call` before a copy of it may go elsewhere (`hedge`); None: no copy (one replica, or
        no call of its size answered yet)."""
        expected = self.expected.get(call.size.bit_length())
        if expected is None or len(self.replicas) < 2:
            return None
        return HEDGE_AFTER * (expected + self.jitter) - self.jitter

    def hedge(self, call: Call, exclude: Iterable[str] = ()) -> Call | None:
        """Where to send a copy of `call`, unanswered past `hedge_after`: the cheapest other replica in rotation (not
        one of `exclude`, not ejected for its model, not slow, not holding a copied call of its own). None where there
        is none or the budget of copies is spent."""
        now = self.clock()
        self._mark_slow(now)
        excluded = {call.address, *exclude}
        others = [
            r
            for r in self.replicas.values()
            if r.address not in excluded
            and not r.slow
            and not r.holds_hedged()
            and not self._ejected(r.address, call.model)
        ]
        if not others or self.hedges < 1:
            return None
        self.hedges -= 1
        call.hedged = True
        return self._send(self._cheapest(others, call.size, now), call.size, call.model, now)

    def _cheapest(self, replicas: list[Replica], size: int, now: float) -> Replica:
        """The replica with the least `(recent sequences + size) x slowness`, ties at random."""
        costs = [(self._load(r, now) + size) * self._slowness(r, now) for r in replicas]
        least = min(costs)
        return self.rng.choice([r for r, cost in zip(replicas, costs, strict=True) if cost == least])

    def _send(self, replica: Replica, size: int, model: str, now: float) -> Call:
        replica.load = self._load(replica, now) + size
        replica.load_at = now
        call = Call(replica.address, size, model, now)
        replica.calls[id(call)] = call
        return call

    def shadow(self, size: int, model: str) -> Call | None:
        """Where to send a copy of a call (`size` sequences to `model`) that no caller waits on: a slow outlier with no
        copy in flight and sequences to its credit. Each call credits each slow replica with its equal share of the
        call's sequences (up to the call's size, so no burst of copies follows a long copy) and each copy costs its
        sequences, so a slow replica is sent an equal share of the worker's work, one call at a time, and its times
        show when it can carry that again. None when no replica is slow, none is due, or none is left in rotation
        (the slow ones then get the calls themselves)."""
        now = self.clock()
        healthy = [r for r in self.replicas.values() if not self._ejected(r.address, model)]
        if all(r.slow for r in healthy):
            return None
        chosen: Call | None = None
        for replica in (r for r in healthy if r.slow):
            replica.credit = min(replica.credit + size / len(healthy), size)
            idle = not any(call.shadow for call in replica.calls.values())
            if chosen is None and idle and replica.credit > 0:
                replica.credit -= size
                chosen = self._send(replica, size, model, now)
                chosen.shadow = True
        return chosen

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
            slowness, steady = self._slowness_now(replica, now), self._steady_now(replica, now)
            low, high = SLOWNESS_RANGE
            sample = self._ratio(seconds, expected)  # at once when slower (peak-sensitive, as Finagle's and Linkerd's)
            slowness = sample if sample > slowness else slowness + SLOWNESS_WEIGHT * (sample - slowness)
            replica.slowness = min(high, max(low, slowness))
            replica.steady = steady + STEADY_WEIGHT * (min(seconds / expected, STEADY_CAP) - steady)
            replica.slowness_at = now
        for key in self._keys(call.address, call.model):
            if key in self.ejections and call.started >= self.ejections[key].since:
                self._rejoin(key)

    def failed(self, call: Call, reason: str) -> None:
        """`call` failed for `reason` (one of REASONS) on its replica: out of rotation for a growing time, longer for
        each failed probe. A call sent before the replica's current ejection ran its time (one of several in flight
        when it failed, or one sent while every replica was out) says nothing new: the ejection stays as it is,
        neither longer nor counted again, so a burst of failures is one ejection, not a count that keeps the replica
        out for `longest` once it answers again; nor does one sent before an ejection that an answer has ended since."""
        self._end(call)
        key = (call.address, call.model if reason == "not_found" else "")
        current = self.ejections.get(key)
        if current is not None and call.started < current.until:
            return
        if current is None and key in self.rejoined and call.started < self.rejoined[key].until:
            return  # sent before its last ejection ended: an answer since put it back
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

    def _even_load(self, replica: Replica, now: float) -> None:
        """A replica back in rotation counts as much recent work as the others' average: with less, it would be the
        cheapest for every call until its count caught up (a burst on a replica only just recovered)."""
        others = [self._load(r, now) for r in self.replicas.values() if r is not replica and not r.slow]
        if others:
            replica.load, replica.load_at = max(self._load(replica, now), sum(others) / len(others)), now

    def _rejoin(self, key: tuple[str, str]) -> None:
        ejection, now = self.ejections.pop(key), self.clock()
        if (replica := self.replicas.get(key[0])) is not None:
            self._even_load(replica, now)
        self.rejoined[key] = Ejection(ejection.reason, ejection.since, now, ejection.count)
        self.listener(key[0], ejection.reason, False)

    @staticmethod
    def _keys(address: str, model: str) -> tuple[tuple[str, str], ...]:
        return ((address, ""), (address, model))

    def _ejected(self, address: str, model: str) -> bool:
        return any(key in self.ejections for key in self._keys(address, model))

    def _probe_due(self, address: str, model: str, now: float) -> bool:
        found = [self.ejections[key] for key in self._keys(address, model) if key in self.ejections]
        return bool(found) and all(e.until <= now and not e.probing for e in found)

    def _expire(self, now: float) -> None:
        """End the ejections for one model that no call probed for `longest` seconds after they ended: nothing calls
        that model (a drained version), so they say nothing of the replica, which would stay out on its metrics."""
        for key, ejection in list(self.ejections.items()):
            if key[1] and not ejection.probing and ejection.until + self.longest <= now:
                self._rejoin(key)

    def _mark_slow(self, now: float) -> None:
        """Mark the slow outliers: slower than `OUTLIER` times the least slow replica (counting calls held now, but not
        those hedged: their copy answered, and their own time tells once they end), until no slower than `RECOVERED`
        times it."""
        slowness = {address: self._slowness(r, now, hedged=False) for address, r in self.replicas.items()}
        steady = {address: self._steady_now(r, now) for address, r in self.replicas.items()}
        least, least_steady = min(slowness.values()), min(steady.values())
        for address, replica in self.replicas.items():
            bound = RECOVERED if replica.slow else OUTLIER
            slow = len(slowness) > 1 and (slowness[address] > bound * least or steady[address] > bound * least_steady)
            if slow != replica.slow:
                replica.slow, replica.credit = slow, 0.0
                if not slow:
                    self._even_load(replica, now)
                self.listener(address, "slow", slow)

    def _load(self, replica: Replica, now: float) -> float:
        return replica.load * 0.5 ** ((now - replica.load_at) / LOAD_HALF_LIFE)

    def _slowness_now(self, replica: Replica, now: float) -> float:
        return self._faded(replica.slowness, replica, now)

    def _steady_now(self, replica: Replica, now: float) -> float:
        return self._faded(replica.steady, replica, now)

    @staticmethod
    def _faded(value: float, replica: Replica, now: float) -> float:
        """`value`, one of the replica's ratios, faded back towards 1 since its last update (`SLOWNESS_HALF_LIFE`)."""
        return 1.0 + (value - 1.0) * 0.5 ** ((now - replica.slowness_at) / SLOWNESS_HALF_LIFE)

    def _slowness(self, replica: Replica, now: float, hedged: bool = True) -> float:
        """Its slowness, or as slow as its longest-outstanding call (hedged ones too, unless `hedged` is False) shows
        if that is slower."""
        slowness = self._slowness_now(replica, now)
        for call in replica.calls.values():
            if call.hedged and not hedged:
                continue
            expected = self.expected.get(call.size.bit_length())
            if expected is not None:
                slowness = max(slowness, self._ratio(now - call.started, expected))
        return slowness

    def _ratio(self, seconds: float, expected: float) -> float:
        """How many times its usual time a call took, `JITTER` added to both."""
        return (seconds + self.jitter) / (expected + self.jitter)

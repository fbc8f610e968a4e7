"""The replica policy on a fake clock with made-up outcomes: sequences (not calls) spread evenly over healthy
replicas, a slow replica given little and its share back once it recovers, a stalled call counted at once, a slow
outlier given only shadow copies (one call at a time, the work it would carry) until their times show it recovered;
a failing
replica out of rotation for a growing time, probed back by one call, out for one model only when only that model
is missing on it, and every replica used when all are out."""

from __future__ import annotations

import random

import pytest

from services.triton.balancer import JITTER, Balancer

A, B = "127.0.0.2:8001", "127.0.0.3:8001"


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def balancer(clock: Clock, events: list | None = None, **kwargs) -> Balancer:
    """Two replicas, as the gateway makes them (`JITTER` included) unless `kwargs` say otherwise."""
    listener = (lambda *event: events.append(event)) if events is not None else None
    return Balancer([A, B], clock=clock, rng=random.Random(7), listener=listener, **kwargs)


def serve(pool: Balancer, clock: Clock, seconds: float, speed: dict[str, float], sizes=(30, 1)) -> dict[str, int]:
    """One worker's calls one after the other (coalescing depth 1) for `seconds`, sizes in turn; a call of n sequences
    takes (2 ms + n x 0.5 ms) x speed[replica]. The sequences each replica got."""
    got = {A: 0, B: 0}
    end, turn = clock.now + seconds, 0
    while clock.now < end:
        size = sizes[turn % len(sizes)]
        turn += 1
        call = pool.start(size, "encoder")
        clock.now += (0.002 + 0.0005 * size) * speed[call.address]
        pool.succeeded(call)
        got[call.address] += size
    return got


def share(got: dict[str, int], address: str) -> float:
    return got[address] / sum(got.values())


def test_batches_of_30_and_single_texts_in_turn_spread_their_sequences_evenly():
    clock = Clock()
    got = serve(balancer(clock), clock, 5.0, {A: 1.0, B: 1.0})
    assert 0.4 <= share(got, A) <= 0.6, got  # round_robin by call: 30 to one, 1 to the other, 97% / 3%


def test_a_replica_ten_times_slower_gets_a_tenth_of_the_work_and_its_share_back_when_it_recovers():
    clock, pool = Clock(), None
    pool = balancer(clock)
    serve(pool, clock, 5.0, {A: 1.0, B: 1.0})
    slow = serve(pool, clock, 10.0, {A: 1.0, B: 10.0})
    assert share(slow, B) <= 0.12, slow
    serve(pool, clock, 20.0, {A: 1.0, B: 1.0})
    recovered = serve(pool, clock, 10.0, {A: 1.0, B: 1.0})
    assert 0.4 <= share(recovered, B) <= 0.6, recovered


def late_answers(pool: Balancer, clock: Clock, seconds: float, rng: random.Random) -> tuple[dict[str, int], int]:
    """Calls of a model that answers in 2-3 ms on two healthy replicas of a busy host: one call in 20, on either,
    answers 30 ms late. The sequences each replica got, and how many times one went out of rotation."""
    got, flips = {A: 0, B: 0}, 0
    end = clock.now + seconds
    while clock.now < end:
        call = pool.start(1, "encoder")
        clock.now += 0.0025 + (0.03 if rng.random() < 0.05 else 0.0)
        pool.succeeded(call)
        got[call.address] += 1
        flips += sum(replica.slow for replica in pool.replicas.values())
    return got, flips


def test_late_answers_of_a_busy_host_leave_fast_replicas_in_rotation_and_even():
    clock, events = Clock(), []
    got, flips = late_answers(balancer(clock, events), clock, 10.0, random.Random(3))
    assert events == [] and flips == 0
    assert 0.4 <= share(got, A) <= 0.6, got
    clock, events = Clock(), []
    late_answers(balancer(clock, events, jitter=0.0), clock, 10.0, random.Random(3))
    assert events, "compared without JITTER, the same late answers call a healthy replica slow"


@pytest.mark.parametrize("speed", [1.0, 20.0], ids=["calls of 2-17 ms", "calls of 40-350 ms (the real model here)"])
@pytest.mark.parametrize("factor", [5, 10])
def test_with_jitter_a_replica_five_or_ten_times_slower_is_still_left_out(speed, factor):
    # JITTER alone would keep a fast model's replica ten times slower in rotation: its steady ratio leaves it out
    clock, events = Clock(), []
    pool = balancer(clock, events)
    serve(pool, clock, 5.0, {A: speed, B: speed})
    slow = serve(pool, clock, 10.0, {A: speed, B: factor * speed})
    assert (B, "slow", True) in events and share(slow, B) <= 0.12, slow


def test_a_call_held_far_past_its_sizes_usual_time_sends_the_next_calls_elsewhere():
    clock = Clock()
    pool = balancer(clock)
    serve(pool, clock, 2.0, {A: 1.0, B: 1.0})
    stuck = pool.start(1, "encoder")
    clock.now += 1.0  # stalled (SIGSTOP): no answer, no failure yet
    others = [pool.start(1, "encoder") for _ in range(20)]
    assert {call.address for call in others} == {A, B} - {stuck.address}


def test_a_failed_replica_is_out_for_a_growing_time_and_one_call_probes_it_back():
    clock, events = Clock(), []
    pool = balancer(clock, events, base=1.0, longest=30.0)
    pool.failed(pool.start(1, "encoder", exclude=[B]), "unavailable")
    assert events == [(A, "unavailable", True)] and pool.ejected() == {A: "unavailable"}
    for expected_out in (1.0, 2.0, 4.0):  # each probe fails: out twice as long
        assert {pool.start(1, "encoder").address for _ in range(10)} == {B}
        clock.now += expected_out - 0.01
        assert pool.start(1, "encoder").address == B
        clock.now += 0.02
        probe = pool.start(1, "encoder")
        assert probe.address == A
        assert {pool.start(1, "encoder").address for _ in range(10)} == {B}, "no call beside the probe"
        pool.failed(probe, "unavailable")
    clock.now += 8.0
    probe = pool.start(1, "encoder")
    assert probe.address == A
    pool.succeeded(probe)
    assert pool.ejected() == {} and events[-1] == (A, "unavailable", False)
    assert len(events) == 5, "ejected 4 times, back once"


def test_ejections_grow_to_the_longest_and_start_again_from_base_after_a_quiet_spell():
    clock = Clock()
    pool = balancer(clock, base=1.0, longest=4.0)
    for _ in range(5):
        pool.failed(pool.start(1, "encoder", exclude=[B]), "unavailable")
        clock.now = pool.ejections[(A, "")].until
    assert pool.ejections[(A, "")].until - pool.ejections[(A, "")].since == 4.0
    pool.succeeded(pool.start(1, "encoder"))  # the probe answers: back
    assert pool.ejected() == {}
    pool.failed(pool.start(1, "encoder", exclude=[B]), "internal")  # soon after: still counts as in a row
    assert pool.ejections[(A, "")].until - clock.now == 4.0
    clock.now += 4.0
    pool.succeeded(pool.start(1, "encoder"))
    clock.now += 4.1  # longer than the longest ejection without a failure
    pool.failed(pool.start(1, "encoder", exclude=[B]), "internal")
    assert pool.ejections[(A, "")].until - clock.now == 1.0


def test_a_model_missing_on_one_replica_takes_it_out_for_that_model_only():
    clock = Clock()
    pool = balancer(clock)
    pool.failed(pool.start(1, "old/1", exclude=[B]), "not_found")
    assert {pool.start(1, "old/1").address for _ in range(20)} == {B}
    assert {pool.start(1, "encoder/").address for _ in range(20)} == {A, B}


def test_a_model_no_longer_called_ends_its_ejection_once_unprobed_for_the_longest_ejection():
    clock, events = Clock(), []
    pool = balancer(clock, events, longest=30.0)
    pool.failed(pool.start(1, "emb/2", exclude=[B]), "not_found")  # a version being drained, then never called
    clock.now += 30.5
    pool.succeeded(pool.start(1, "emb/3"))
    assert pool.ejected() == {A: "not_found"}, "still out until unprobed for 30 s past its end"
    clock.now += 1.0
    pool.succeeded(pool.start(1, "emb/3"))
    assert pool.ejected() == {} and events[-1] == (A, "not_found", False)
    pool.failed(pool.start(1, "emb/2", exclude=[B]), "not_found")  # called again and missing: out again, for longer
    assert pool.ejections[(A, "emb/2")].count == 2


def test_failures_while_every_replica_is_out_are_one_ejection_not_a_count_that_keeps_it_out():
    clock = Clock()
    pool = balancer(clock)
    pool.failed(pool.start(1, "encoder", exclude=[B]), "unavailable")
    pool.failed(pool.start(1, "encoder", exclude=[A]), "unavailable")
    for _ in range(20):  # both out: every replica used, and both keep failing for a while
        clock.now += 0.02
        call = pool.start(1, "encoder")
        pool.failed(call, "unavailable")
    assert {key: e.count for key, e in pool.ejections.items()} == {(A, ""): 1, (B, ""): 1}
    clock.now += 1.0
    probe = pool.start(1, "encoder")
    pool.failed(probe, "unavailable")  # a failed probe is what keeps a replica out longer
    assert pool.ejections[(probe.address, "")].count == 2


def test_a_probe_that_ends_with_no_verdict_lets_the_next_call_probe():
    clock = Clock()
    pool = balancer(clock)
    pool.failed(pool.start(1, "encoder", exclude=[B]), "unavailable")
    clock.now += 1.0
    probe = pool.start(1, "encoder")
    pool.abandoned(probe)  # its caller went away
    assert pool.start(1, "encoder").address == A


def test_with_every_replica_out_every_replica_is_still_used_and_an_answer_puts_it_back():
    clock = Clock()
    pool = balancer(clock)
    pool.failed(pool.start(1, "encoder", exclude=[B]), "unavailable")
    pool.failed(pool.start(1, "encoder", exclude=[A]), "unavailable")
    calls = [pool.start(1, "encoder") for _ in range(20)]
    assert {call.address for call in calls} == {A, B}
    for call in calls:
        pool.succeeded(call)
    assert pool.ejected() == {}


def test_a_call_excluded_from_its_failed_replica_goes_to_another_or_to_the_only_one():
    clock = Clock()
    pool = balancer(clock)
    assert {pool.start(1, "encoder", exclude=[A]).address for _ in range(10)} == {B}
    alone = Balancer([A], clock=clock)
    assert alone.start(1, "encoder", exclude=[A]).address == A


def test_replicas_resolved_again_join_fresh_and_gone_ones_take_their_ejections_with_them():
    clock, events = Clock(), []
    pool = balancer(clock, events)
    pool.failed(pool.start(1, "encoder", exclude=[B]), "unavailable")
    pool.set_addresses([B, "127.0.0.5:8001"])
    assert pool.ejected() == {} and events[-1] == (A, "unavailable", False)
    assert {pool.start(1, "encoder").address for _ in range(40)} == {B, "127.0.0.5:8001"}


@pytest.mark.parametrize("reason", ["unavailable", "internal", "not_found"])
def test_every_reason_is_reported_with_its_replica(reason):
    clock, events = Clock(), []
    pool = balancer(clock, events)
    pool.failed(pool.start(1, "encoder", exclude=[A]), reason)
    assert events == [(B, reason, True)]


def test_a_slow_outlier_gets_no_calls_only_shadow_copies_whose_times_bring_it_back():
    clock, events = Clock(), []
    pool = balancer(clock, events)
    serve(pool, clock, 2.0, {A: 1.0, B: 1.0})
    serve(pool, clock, 3.0, {A: 1.0, B: 10.0})
    assert pool.ejected() == {B: "slow"} and (B, "slow", True) in events
    calls = [pool.start(30, "encoder") for _ in range(20)]
    assert {call.address for call in calls} == {A}
    for call in calls:
        pool.abandoned(call)  # ended, so that only the copies' times speak
    copy = pool.shadow(30, "encoder")
    assert copy is not None and copy.address == B and copy.shadow
    assert pool.shadow(30, "encoder") is None, "one copy in flight"
    clock.now += 0.017  # as fast as A again
    pool.succeeded(copy)
    started, calls, copied = clock.now, 0, 0
    while True:
        assert clock.now - started < 10.0, "back within 10 s"
        pool.abandoned(pool.start(30, "encoder"))  # where outliers are marked
        if not pool.ejected():
            break
        calls += 1
        copy = pool.shadow(30, "encoder")
        clock.now += 0.017
        if copy is not None:
            assert copy.address == B
            copied += 1
            pool.succeeded(copy)
    assert abs(copied - calls / 2) <= 1, f"{copied} of {calls} calls copied: its equal share of two replicas'"
    assert events[-1] == (B, "slow", False)
    assert B in {pool.start(30, "encoder").address for _ in range(20)}, "back in rotation"


class Host:
    """A replica's processes running one call at a time, held to `quota` seconds of CPU per 0.1 s (a cgroup CPU quota)
    or not at all: a call of n sequences needs (2 ms + n x 0.5 ms) x `speed` of CPU."""

    PERIOD = 0.1

    def __init__(self, quota: float | None = None, speed: float = 1.0):
        self.quota, self.speed, self.free_at, self.period, self.used = quota, speed, 0.0, -1, 0.0

    def run(self, start: float, size: int) -> float:
        """When a call sent at `start` is answered."""
        now, need = max(start, self.free_at), (0.002 + 0.0005 * size) * self.speed
        while need > 1e-12:
            if self.quota is None:
                now, need = now + need, 0.0
                break
            period = int(now / self.PERIOD + 1e-9)  # 128.1 / 0.1 is 1280.9999...
            if period != self.period:
                self.period, self.used = period, 0.0
            ran = min(need, self.quota - self.used, (period + 1) * self.PERIOD - now)
            if ran <= 0:
                now = (period + 1) * self.PERIOD
                continue
            now, need, self.used = now + ran, need - ran, self.used + ran
        self.free_at = now
        return now


def serve_copied(
    pool: Balancer,
    clock: Clock,
    seconds: float,
    hosts: dict[str, Host],
    copies: list,
    gap: float = 0.0,
    sizes: tuple[int, ...] = (30, 1),
    copied: list | None = None,
) -> dict[str, int]:
    """As `serve`, on `hosts`, a call due every `gap` seconds at most (0: one after the other), with each call's shadow
    copy sent and answered too; `copies` holds those in flight, as (answered at, copy), and `copied` gets each copy's
    size. The sequences callers waited on, by replica."""
    got = {A: 0, B: 0}
    end, turn = clock.now + seconds, 0
    while clock.now < end:
        size = sizes[turn % len(sizes)]
        turn += 1
        due = clock.now + gap
        call = pool.start(size, "encoder")
        if (copy := pool.shadow(size, "encoder")) is not None:
            copies.append((hosts[copy.address].run(clock.now, size), copy))
            if copied is not None:
                copied.append(size)
        answered = hosts[call.address].run(clock.now, size)
        got[call.address] += size
        answers = [(at, copy) for at, copy in copies if at <= max(answered, due)] + [(answered, call)]
        for at, ended in sorted(answers, key=lambda pair: pair[0]):  # in the order they were answered
            if ended is not call:
                copies.remove((at, ended))
            clock.now = max(clock.now, at)
            pool.succeeded(ended)
        clock.now = max(clock.now, due)
    return got


def test_a_replica_held_to_a_tenth_of_a_core_stays_out_while_held_and_rejoins_once_released():
    # a lone call fits in its tenth of a core and is answered at the usual speed: a copy now and then let it rejoin,
    # buckle under its share and go out again every few seconds (the open-loop benchmark's tail)
    clock, events, copies = Clock(), [], []
    pool = balancer(clock, events)
    serve_copied(pool, clock, 5.0, {A: Host(), B: Host()}, copies)
    held = {A: Host(), B: Host(quota=0.01)}
    serve_copied(pool, clock, 2.0, held, copies)
    assert pool.ejected() == {B: "slow"}
    events.clear()
    serve_copied(pool, clock, 20.0, held, copies)
    assert events == [], "out for as long as it is held"
    released = {A: Host(), B: Host()}
    released[B].free_at = held[B].free_at  # what it was running goes on
    started = clock.now
    while pool.ejected():
        assert clock.now - started < 10.0, "back within 10 s of its release"
        serve_copied(pool, clock, 0.1, released, copies)
    assert 0.4 <= share(serve(pool, clock, 10.0, {A: 1.0, B: 1.0}), B) <= 0.6


def test_a_replica_out_gets_copies_of_its_share_so_one_that_can_carry_it_rejoins():
    # a batch due every 25 ms: B held to 20% of a core carries its half in rotation, not every call; copies of every
    # call kept it out for as long as the load lasted (30 s and more in this simulation)
    clock, events, copies = Clock(), [], []
    pool = balancer(clock, events)
    serve_copied(pool, clock, 5.0, {A: Host(), B: Host()}, copies, gap=0.025)
    got = serve_copied(pool, clock, 20.0, {A: Host(), B: Host(quota=0.02)}, copies, gap=0.025)
    assert events == [] and share(got, B) > 0.4, "it carries its share in rotation"
    held = {A: Host(), B: Host(quota=0.003)}
    serve_copied(pool, clock, 5.0, held, copies, gap=0.025)
    assert pool.ejected() == {B: "slow"}
    partial = {A: Host(), B: Host(quota=0.02)}
    partial[B].free_at = held[B].free_at
    started = clock.now
    while pool.ejected():
        assert clock.now - started < 15.0, "back once it can carry its share"
        serve_copied(pool, clock, 0.1, partial, copies, gap=0.025)


@pytest.mark.parametrize("gap", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("sizes", [(30,), (30, 1), (1,) * 9 + (30,)], ids=["30", "30-1", "nine 1s then 30"])
def test_a_slow_replica_is_copied_its_equal_share_of_the_sequences_at_a_few_calls_a_second(gap, sizes):
    # each gateway worker has its own balancer, so a fleet's load is often a few calls a second per worker; compared
    # by decayed loads, a worker calling once a second copied nearly every call to a slow replica
    clock, copies, copied = Clock(), [], []
    pool = balancer(clock)
    serve(pool, clock, 2.0, {A: 1.0, B: 1.0})
    serve(pool, clock, 3.0, {A: 1.0, B: 10.0})
    hosts = {A: Host(), B: Host(speed=20.0)}  # slow enough that lone texts show it past `JITTER`
    waited = serve_copied(pool, clock, 60.0, hosts, copies, gap, sizes, copied)
    assert pool.ejected() == {B: "slow"} and waited[B] == 0
    assert 0.45 <= sum(copied) / waited[A] <= 0.6, (sum(copied), waited)


def test_a_slow_replica_left_alone_in_rotation_gets_the_calls_and_no_copies():
    clock = Clock()
    pool = balancer(clock)
    serve(pool, clock, 2.0, {A: 1.0, B: 1.0})
    serve(pool, clock, 3.0, {A: 1.0, B: 10.0})
    assert pool.ejected() == {B: "slow"}
    pool.failed(pool.start(30, "encoder"), "unavailable")  # A's connection lost: out for 1 s
    call = pool.start(30, "encoder")
    assert call.address == B and pool.shadow(30, "encoder") is None, "not each call twice on the one left"


def test_healthy_replicas_get_no_shadow_copies():
    clock = Clock()
    pool = balancer(clock)
    serve(pool, clock, 2.0, {A: 1.0, B: 1.2})
    assert pool.shadow(30, "encoder") is None and pool.ejected() == {}


def test_a_call_may_be_copied_after_twice_its_sizes_usual_time_to_another_replica_in_rotation():
    clock = Clock()
    pool = balancer(clock)
    first = pool.start(30, "encoder")
    assert pool.hedge_after(first) is None, "no call of its size answered yet"
    clock.now += 0.04
    pool.succeeded(first)
    call = pool.start(30, "encoder")
    assert pool.hedge_after(call) == pytest.approx(2 * 0.04 + JITTER), "twice its usual time, plus JITTER"
    copy = pool.hedge(call)
    assert copy is not None and copy.address != call.address and copy.size == 30
    assert Balancer([A], clock=clock).hedge_after(call) is None, "one replica: nowhere to copy to"


def test_no_copy_goes_to_an_ejected_or_slow_replica():
    clock = Clock()
    pool = balancer(clock)
    pool.failed(pool.start(1, "encoder", exclude=[A]), "unavailable")
    assert pool.hedge(pool.start(1, "encoder")) is None, "B is out"
    clock.now += 60
    pool = balancer(clock)
    serve(pool, clock, 2.0, {A: 1.0, B: 1.0})
    serve(pool, clock, 3.0, {A: 1.0, B: 10.0})
    assert pool.ejected() == {B: "slow"} and pool.hedge(pool.start(1, "encoder")) is None


def test_copies_are_at_most_a_twentieth_of_the_calls_after_a_burst_of_three():
    clock = Clock()
    pool = balancer(clock)
    copies = 0
    for _ in range(200):
        call = pool.start(1, "encoder")
        copy = pool.hedge(call)  # every call held: a copy wanted each time
        copies += copy is not None
        for sent in (call, copy):
            if sent is not None:
                pool.succeeded(sent)
    assert 10 <= copies <= 3 + 200 * 0.05


def test_a_replica_holding_a_copied_call_gets_no_new_call_until_it_ends():
    clock = Clock()
    pool = balancer(clock)
    serve(pool, clock, 1.0, {A: 1.0, B: 1.0})
    held = pool.start(30, "encoder")
    clock.now += pool.hedge_after(held)
    copy = pool.hedge(held)
    assert copy is not None
    pool.succeeded(copy)
    pool.replicas[copy.address].load = 1000.0  # far more recent work than the held one's: cost alone would pick it
    pool.replicas[held.address].load = 0.0
    assert {pool.start(30, "encoder").address for _ in range(10)} == {copy.address}
    pool.succeeded(held)
    clock.now += 30  # its slowness faded
    assert held.address in {pool.start(1, "encoder").address for _ in range(20)}


def test_a_replica_back_in_rotation_shares_the_calls_instead_of_taking_them_all():
    clock = Clock()
    pool = balancer(clock)
    serve(pool, clock, 2.0, {A: 1.0, B: 1.0})
    pool.failed(pool.start(1, "encoder", exclude=[A]), "unavailable")
    serve(pool, clock, 0.9, {A: 1.0, B: 1.0})  # A alone: its recent work piles up
    clock.now += 0.2
    probe = pool.start(1, "encoder")
    assert probe.address == B
    pool.succeeded(probe)  # B is back
    got = serve(pool, clock, 0.5, {A: 1.0, B: 1.0})
    assert 0.3 <= share(got, B) <= 0.7, got


def test_no_copy_goes_to_a_replica_holding_a_copied_call():
    clock = Clock()
    pool = balancer(clock)
    pool.expected[1] = 0.010
    pool.replicas[B].load = 30.0
    stalled = pool.start(1, "encoder")
    clock.now += 0.025
    copy = pool.hedge(stalled)
    assert (stalled.address, copy.address) == (A, B)
    pool.succeeded(copy)
    call = pool.start(1, "encoder")
    assert call.address == B, "no new call to the stalled replica"
    clock.now += 0.025
    assert pool.hedge(call) is None, "its copy would go to the stalled replica"
    assert pool.hedge(call, exclude=[B]) is None


def test_calls_in_flight_when_their_replica_was_ejected_neither_lengthen_nor_count_its_ejection():
    """Several calls lost with one connection (a hedged call running on, a shadow copy, the probe) are one failure."""
    clock = Clock()
    pool = balancer(clock)
    calls = [pool.start(1, "encoder", exclude=[A]) for _ in range(3)]
    clock.now += 0.1
    for call in calls:
        pool.failed(call, "unavailable")
        clock.now += 0.05
    ejection = pool.ejections[(B, "")]
    assert ejection.count == 1 and ejection.until == pytest.approx(100.1 + 1.0), "one ejection of the base length"
    clock.now = ejection.until
    probe = pool.start(1, "encoder")
    assert probe.address == B
    clock.now += 0.1
    pool.failed(probe, "unavailable")
    assert pool.ejections[(B, "")].count == 2, "a probe sent after the ejection began fails it again: doubled"

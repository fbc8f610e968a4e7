"""What an attack sends and what the generator says about itself: totals, merged stats of several processes, the
limit that ended an attack, the loud warnings."""

from loadtest.spec import AttackSpec, AttackStats, warnings_for


def test_total_requests_of_open_and_closed_loops():
    assert AttackSpec(targets=[], rate=50, duration=2).total() == 100
    assert AttackSpec(targets=[], rate=50, duration=2, requests=30).total() == 30, "the sooner limit"
    assert AttackSpec(targets=[], rate=50, duration=None, requests=30).total() == 30
    assert AttackSpec(targets=[], rate=None, duration=2).total() is None, "closed loop: until the duration ends"
    assert AttackSpec(targets=[], rate=None, requests=7).total() == 7


def test_stats_of_processes_merge():
    a = AttackStats(sent=10, first_send=5.0, last_send=9.0, max_lag=0.01, cpu_seconds=1, wall_seconds=4, dropped=1)
    b = AttackStats(sent=11, first_send=4.5, last_send=9.5, max_lag=0.02, cpu_seconds=2, wall_seconds=5)
    merged = a.merge(b)
    assert (merged.sent, merged.first_send, merged.last_send, merged.max_lag) == (21, 4.5, 9.5, 0.02)
    assert (merged.cpu_seconds, merged.wall_seconds, merged.dropped) == (3, 5, 1)
    assert AttackStats().merge(b).first_send == 4.5, "an empty part does not pull the first send to 0"
    assert merged.achieved_rate == 4.0 and merged.cpu_busy == 0.6


def test_what_ended_the_attack():
    assert AttackStats(sent=5).ended_by(AttackSpec(targets=[], requests=5)) == "--requests 5 (all sent)"
    assert AttackStats(sent=3).ended_by(AttackSpec(targets=[], duration=2)) == "--duration 2s (3 requests sent)"
    assert AttackStats(sent=3).ended_by(AttackSpec(targets=[], duration=None)) == "3 requests sent"


def test_the_generator_warns_when_it_was_the_limit():
    spec = AttackSpec(targets=[], rate=100)
    kept = AttackStats(sent=101, first_send=0.0, last_send=1.0, cpu_seconds=0.5, wall_seconds=1.0)
    assert warnings_for(spec, kept) == []
    behind = AttackStats(sent=51, first_send=0.0, last_send=1.0, max_lag=0.25, cpu_seconds=0.95, wall_seconds=1.0)
    fell, cpu = warnings_for(spec, behind)
    assert "sent 50.0 req/s of the 100 asked (worst lag 250 ms)" in fell and "95% of 1 CPU(s)" in cpu
    assert warnings_for(spec, behind, processes=2)[1:] == [], "two processes: 95% of one CPU is not the limit"
    dropped = AttackStats(sent=101, first_send=0.0, last_send=1.0, wall_seconds=1.0, dropped=4)
    assert warnings_for(spec, dropped) == ["4 requests were not sent: more than the in-flight limit were outstanding"]

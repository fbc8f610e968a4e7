"""`serving analyze` waits for the spans still being exported (`services.analysis.settle`, on a fake clock over a
real span store), says how many traced requests are still due when it stops waiting, and labels what it measured in
words (load levels, stages only some requests pass through)."""

from __future__ import annotations

import dataclasses
import time

from typer.testing import CliRunner

from services.analysis.decompose import RIDING, decompose_all
from services.analysis.report import stage_table
from services.analysis.settle import QUIET_S, settle
from services.analysis.store import SpanStore
from services.analysis.verdict import analyze, level_name
from services.cli import app
from tests.unit.analysis.test_analysis import Trace, gateway_trace
from tests.unit.analysis.test_partition import failed_trace

T0 = time.time()
"""The wall clock while a test waits: spans that ended before it were sent by requests made before the wait."""


def before_the_wait(spans, ago_s: float = 0.5):
    """The spans moved to have ended `ago_s` before the wait began."""
    shift = int((T0 - ago_s) * 1e9) - max(s.end_ns for s in spans)
    return [dataclasses.replace(s, start_ns=s.start_ns + shift, end_ns=s.end_ns + shift) for s in spans]


def split(spans):
    """A trace's spans as two exports: the load generator's and Triton's first, the gateway's (every 5 s) later."""
    return [s for s in spans if s.service != "gateway"], [s for s in spans if s.service == "gateway"]


class FakeClock:
    def __init__(self, store: SpanStore, arrivals: dict[int, list]):
        self.now, self.sleeps, self.store, self.arrivals = 0.0, 0, store, arrivals

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        """Time passes; at the n-th sleep, the spans `arrivals[n]` arrive."""
        self.now += seconds
        self.sleeps += 1
        self.store.add(self.arrivals.get(self.sleeps, []))

    def settle(self, **limits):
        return settle(self.store, clock=self, sleep=self.sleep, wall=lambda: T0, **limits)


def test_waits_until_every_trace_has_the_spans_it_misses(tmp_path):
    store = SpanStore(tmp_path / "spans.db")
    first, later = split(before_the_wait(gateway_trace("a" * 32)))
    store.add(first)  # Triton's spans are in, the gateway's span they hang from is not
    clock = FakeClock(store, {4: later})  # the gateway's export, at 2 s
    seen = []
    waited = clock.settle(timeout_s=60, report=seen.append)
    assert waited.settled and waited.seen.due == 0 and clock.now == 2.5, "one quiet poll after the last span came"
    assert seen[0].seen.due == 1 and seen[0].seen.requests == 1, "the progress says what is still due"


def test_a_parent_that_never_comes_ends_the_wait_once_nothing_arrives(tmp_path):
    store = SpanStore(tmp_path / "spans.db")
    store.add(split(before_the_wait(gateway_trace("b" * 32)))[0])
    clock = FakeClock(store, {})
    waited = clock.settle(timeout_s=60)
    assert waited.settled and waited.seen.due == 1 and clock.now == QUIET_S


def test_stops_waiting_at_the_timeout_while_spans_keep_arriving(tmp_path):
    store = SpanStore(tmp_path / "spans.db")
    arriving = {n: split(before_the_wait(gateway_trace(f"{n:032x}")))[0] for n in range(1, 1000)}
    clock = FakeClock(store, arriving)
    waited = clock.settle(timeout_s=20)
    assert not waited.settled and waited.seen.due >= 39 and 20 <= clock.now < 21


def test_requests_made_after_the_wait_began_are_not_waited_for(tmp_path):
    """A liveness probe traced every few seconds: its spans start after the wait began."""
    store = SpanStore(tmp_path / "spans.db")
    store.add(before_the_wait(gateway_trace("c" * 32)))
    probes = {n: split(before_the_wait(gateway_trace(f"{n:032x}"), ago_s=-n))[0] for n in range(1, 100)}
    clock = FakeClock(store, probes)
    assert clock.settle(timeout_s=60).settled and clock.now == 0.5


def test_a_store_whose_last_span_ended_long_ago_needs_no_wait(tmp_path):
    store = SpanStore(tmp_path / "spans.db")
    store.add(before_the_wait(gateway_trace("d" * 32), ago_s=60))
    clock = FakeClock(store, {})
    assert clock.settle().settled and clock.sleeps == 0


def test_a_failed_requests_client_span_needs_no_server_span(tmp_path):
    store = SpanStore(tmp_path / "spans.db")
    store.add(before_the_wait(failed_trace("e" * 32, 429, "429")))
    store.add(before_the_wait(failed_trace("f" * 32, 0, "timeout")))
    store.add(before_the_wait(failed_trace("0" * 32, 200, None)))  # answered: its server spans are due
    assert store.progress().due == 1


def test_analyze_says_how_many_traces_are_still_due(tmp_path):
    """Right after an attack: the client spans are in, some requests' server spans are not yet."""
    store = SpanStore(tmp_path / "traces" / "spans.db")
    for i in range(30):
        store.add(recent(gateway_trace(f"{i:032x}", rate=100.0)))
    for i in range(5):
        store.add(recent(failed_trace(f"{i + 100:032x}", 200, None)))
    store.close()
    env = {"SERVING_RUN_DIR": str(tmp_path)}
    result = CliRunner().invoke(app, ["analyze", "--wait", "0.6"], env=env)
    assert result.exit_code == 0, result.output
    assert "waiting for spans still being exported: 275 recent spans, 5 traces still missing spans" in result.output
    assert "stopped waiting (spans were still arriving after 0.6 s): 5 traces still due" in result.output
    assert "5 answered requests have no server spans in the store" in result.output, "the same 5 as the report's note"


def test_a_stale_incomplete_trace_is_not_waited_for(tmp_path):
    """An earlier run's trace that never got its parent span, still in the store: the wait ends with the new trace."""
    store = SpanStore(tmp_path / "spans.db")
    store.add(split(before_the_wait(gateway_trace("1" * 32), ago_s=30))[0])  # 30 s old, its gateway span lost
    store.add(before_the_wait(gateway_trace("2" * 32)))
    clock = FakeClock(store, {})
    waited = clock.settle(timeout_s=60)
    assert waited.settled and waited.seen.due == 0 and clock.now == 0.5, "one quiet poll, not the whole quiet time"
    assert store.progress().due == 1, "the stale trace still misses its span"


def recent(spans):
    """The spans moved to have ended just now."""
    shift = time.time_ns() - max(s.end_ns for s in spans)
    return [dataclasses.replace(s, start_ns=s.start_ns + shift, end_ns=s.end_ns + shift) for s in spans]


def test_levels_are_named_as_the_load_was_made():
    assert level_name(0.0, concurrency="32", mix="short") == "closed loop (32 concurrent requests; payload mix 'short')"
    assert level_name(100.0, mix="long") == "open loop at 100 req/s (payload mix 'long')"
    assert level_name(0.0, attack="clearml-w1-on") == "clearml-w1-on: closed loop"
    assert level_name(None).startswith("all traces")
    spans = gateway_trace("c" * 32, rate=0.0)
    spans[0].attributes.update({"loadtest.concurrency": 32, "loadtest.mix": "short"})
    spans[0].attributes.pop("loadtest.attack")
    (level,) = analyze(decompose_all(spans)).levels
    assert level.name == "closed loop (32 concurrent requests; payload mix 'short')"


def riding_trace(trace_id: str, ride_ms: float) -> list:
    """A gateway request whose texts went in another request's batch: it waited 0.5 ms, then rode `ride_ms`."""
    t = Trace(trace_id)
    server = t.span(None, "gateway", "POST /serve", 0, 1.0 + ride_ms)
    t.span(server, "gateway", "coalesce wait", 0.2, 0.7)
    t.span(server, "gateway", "batch", 0.7, 0.7 + ride_ms)
    return t.spans


def test_a_stage_few_requests_pass_through_shows_its_cost_when_it_happens():
    """The carrier's trace has the batch's stages; the riders' only the time they rode it: the percentiles are over
    the traces it happened in (not 0 ms at p50 beside the largest share), and the table says how many those are."""
    spans = [s for i in range(6) for s in riding_trace(f"{i:032x}", ride_ms=40.0)]
    spans += [s for i in range(14) for s in gateway_trace(f"{i + 100:032x}", infer_ms=2.0)]
    (level,) = analyze(decompose_all(spans)).levels
    riding = next(s for s in level.stages if s.name == RIDING)
    assert riding.seen == 0.3 and abs(riding.p50_ms - 40.0) < 1e-6, "its cost when it happens"
    assert abs(riding.mean_ms - 12.0) < 1e-6, "the mean is over every trace: 6 x 40 ms / 20"
    assert level.dominant_stage == RIDING
    table = "\n".join(stage_table(level))
    assert f"| {RIDING} | 30% | 40.00 |" in table and "over the traces the stage took time in" in table

"""The stages partition each trace's end-to-end time exactly, whatever the spans do: a child that outlives its parent
(Triton's compute output after the response), siblings that overlap, a server span longer than the client's; and the
requests that failed are counted, not silently left out."""

import pytest

from services.analysis.decompose import decompose, decompose_all
from services.analysis.report import markdown
from services.analysis.segments import Segment, partition
from services.analysis.verdict import analyze
from tests.unit.analysis.test_analysis import MS, Trace, gateway_trace


def outliving_trace(trace_id: str, overhang_ms: float = 5.0, rate: float = 100.0):
    """Gateway -> Triton where the encoder's compute span (its output stretch) ends `overhang_ms` after the client
    has its answer: the shape of real Triton traces (compute ends after the response is released)."""
    spans = gateway_trace(trace_id, queue_ms=0.5, infer_ms=2.0, rate=rate)
    compute = next(s for s in spans if s.name == "compute")
    client = next(s for s in spans if s.service == "loadtest")
    compute.end_ns = client.end_ns + int(overhang_ms * MS)
    compute.events["COMPUTE_END"] = compute.end_ns
    next(s for s in spans if s.name == "encoder").end_ns = compute.end_ns
    return spans


def test_a_compute_output_that_outlives_the_response_is_clipped_to_it():
    d = decompose(outliving_trace("c" * 32, overhang_ms=5.0))
    print(f"total {d.total_ms:.3f} ms, stages sum {sum(d.stages.values()):.3f} ms, clipped {d.clipped}")
    assert sum(d.stages.values()) == pytest.approx(d.total_ms, abs=1e-9)
    # the output stretch counts only until Triton's request span ends (its 0.1 ms, then 0.05 ms to the response)
    assert d.stages["encoder compute output"] == pytest.approx(0.15, abs=1e-5)
    assert d.clipped == pytest.approx({"encoder compute output": 5.5}), "0.2 + 0.1 + 0.2 ms, then 5 ms more"


def test_overlapping_siblings_are_counted_once_and_children_stay_inside_their_parent():
    t = Trace("d" * 32)
    server = t.span(None, "gateway", "POST /serve", 0, 10)
    t.span(server, "gateway", "parse", -1, 2)  # starts before its parent
    t.span(server, "gateway", "preprocess", 1, 6)  # overlaps parse by 1 ms
    t.span(server, "gateway", "postprocess", 5, 12)  # overlaps preprocess, ends after the parent
    d = decompose(t.spans)
    assert d.stages == pytest.approx(
        {
            "HTTP handling (front)": 0.0,
            "JSON parse": 2.0,
            "preprocessing (front)": 4.0,
            "postprocess + serialisation": 4.0,
        }
    )
    assert sum(d.stages.values()) == pytest.approx(10.0)


def test_a_server_span_longer_than_the_clients_is_cut_at_the_clients_end():
    spans = gateway_trace("e" * 32)
    client = next(s for s in spans if s.service == "loadtest")
    server = next(s for s in spans if s.name == "POST /serve")
    server.end_ns = client.end_ns + 3 * MS  # the server closes its span after the caller has the answer
    d = decompose(spans)
    assert d.total_ms == pytest.approx((client.end_ns - client.start_ns) / MS)
    assert sum(d.stages.values()) == pytest.approx(d.total_ms)


def test_partition_gives_every_instant_to_one_stage():
    root = Segment("a", 0, 100, [Segment("b", 10, 60, [Segment("c", 50, 200)]), Segment("d", 40, 90)])
    stages, clipped = partition(root)
    assert stages == {"a": 20 * 1e-6, "b": 40 * 1e-6, "c": 10 * 1e-6, "d": 30 * 1e-6}
    assert clipped == {"c": pytest.approx(140 * 1e-6)}
    # a child outside its parent: its own children share the outside time as they would the inside
    _, clipped = partition(Segment("a", 0, 10, [Segment("b", 5, 30, [Segment("c", 20, 30)])]))
    assert clipped == {"b": pytest.approx(10 * 1e-6), "c": pytest.approx(10 * 1e-6)}


def test_stage_shares_add_up_to_one_and_the_clipped_time_is_noted():
    analysis = analyze(decompose_all([s for i in range(30) for s in outliving_trace(f"{i:032x}")]))
    level = analysis.levels[0]
    total_share = sum(s.share for s in level.stages)
    print(f"shares sum to {total_share:.4%}")
    assert total_share == pytest.approx(1.0, abs=1e-9)
    assert sum(level.p99_trace.stages.values()) == pytest.approx(level.p99_trace.total_ms)
    assert any("encoder compute output ran 5.50" in n and "outside its parent span" in n for n in analysis.notes)


def failed_trace(trace_id: str, code: int, error: str | None, rate: float = 100.0):
    """A client span whose request failed and whose server spans never arrived (Triton crashed, or a 429)."""
    t = Trace(trace_id)
    attributes = {"loadtest.rate": rate, "loadtest.attack": "short", "loadtest.trace_ratio": 0.2}
    attributes["http.response.status_code"] = code
    if error:
        attributes["error.type"] = error
    t.span(None, "loadtest", "loadtest POST", 0, 30_000 if error == "timeout" else 1, attributes=attributes)
    return t.spans


def test_failed_and_timed_out_requests_are_counted_and_shown():
    spans = [s for i in range(40) for s in gateway_trace(f"{i:032x}", rate=100.0)]
    for i in range(6):
        spans += failed_trace(f"{i + 100:032x}", 0, "timeout")
    spans += failed_trace(f"{200:032x}", 429, "429")
    analysis = analyze(decompose_all(spans))
    level = analysis.levels[0]
    assert level.traces == 40 and level.failed == {"timeout": 6, "HTTP 429": 1}
    assert level.total_p99_ms < 100, "a 30 s timeout is not a stage of a served request"
    text = markdown(analysis)
    print(text.splitlines()[6])
    assert "7 of 47 traced requests failed (timeout: 6, HTTP 429: 1)" in text
    assert "about 35 in the whole run" in text and "**Not in the table**: 7 traced requests that failed" in text


def test_a_run_where_every_traced_request_failed_says_so():
    spans = [s for i in range(5) for s in failed_trace(f"{i:032x}", 0, "timeout")]
    with pytest.raises(ValueError, match="5 of 5 traced requests failed \\(timeout: 5\\)"):
        analyze(decompose_all(spans))


def test_answered_requests_whose_server_spans_are_missing_are_not_called_failures():
    spans = [s for i in range(30) for s in gateway_trace(f"{i:032x}", rate=100.0)]
    spans += failed_trace(f"{300:032x}", 200, None)  # answered, but its server spans never reached the store
    analysis = analyze(decompose_all(spans))
    assert analysis.levels[0].traces == 30 and "failed" not in " ".join(analysis.notes)
    assert any("1 answered requests have no server spans" in n for n in analysis.notes)

"""Apache Bench's output read back: its whole-second start times spread so that rates computed from them are right,
and its report's fields under `-l` (where the document length is "Variable")."""

import pytest

from loadtest.external import _ab_field, _spread
from loadtest.report import summarize
from loadtest.results import Result


def test_whole_second_start_times_are_spread_over_the_part_of_the_second_the_run_covered():
    # a 2.5 s run from t=100.6 with 100 ms answers, 40 req/s: ab writes seconds 100, 101, 102 only
    started, ended, latency_ms = 100.6, 103.1, 100
    true_starts = [started + i / 40 for i in range(96)]  # the last one starts at 102.975 and ends at 103.075
    rows = [{"seconds": str(int(s)), "ttime": str(latency_ms)} for s in true_starts]
    stamps = _spread(rows, started, ended)
    assert all(started <= s <= ended - latency_ms / 1000 for s in stamps)
    results = [Result(i, s, latency_ms * 1_000_000, 200, 0, 0) for i, s in enumerate(stamps)]
    whole = [Result(i, float(r["seconds"]), latency_ms * 1_000_000, 200, 0, 0) for i, r in enumerate(rows)]
    print(
        f"rate from spread stamps {summarize(results)['rate']:.1f}, from whole seconds {summarize(whole)['rate']:.1f}"
    )
    assert summarize(results)["rate"] == pytest.approx(40, rel=0.05)
    assert summarize(whole)["rate"] == pytest.approx(47.5), "whole seconds: 95 requests over 2 s"


def test_ab_fields_under_variable_length():
    report = "Document Length:        Variable\nFailed requests:        3\nHTML transferred:       21763 bytes\n"
    assert _ab_field(report, "Document Length") == 0
    assert _ab_field(report, "Failed requests") == 3
    assert _ab_field(report, "HTML transferred") == 21763
    assert _ab_field(report, "Non-2xx responses") == 0

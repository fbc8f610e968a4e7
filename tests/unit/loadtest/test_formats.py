import base64
import json

import pytest

from loadtest.report import summarize, text_report
from loadtest.results import Result, read_results, write_results
from loadtest.targets import build_target, build_targets, read_vegeta_targets, write_vegeta_targets


def test_targets_for_each_stack_format():
    serve = build_target("http://h:1/", "serve", ["a"])
    assert serve.url == "http://h:1/serve/minilm" and json.loads(serve.body) == {"text": "a"}
    many = build_target("http://h:1", "serve", ["a", "b"])
    assert json.loads(many.body) == {"texts": ["a", "b"]}
    openai = build_target("http://h:1", "openai", ["a", "b"])
    assert openai.url.endswith("/v1/embeddings") and json.loads(openai.body)["input"] == ["a", "b"]
    kserve = json.loads(build_target("http://h:1", "kserve", ["a", "b"]).body)
    assert kserve["inputs"][0] == {"name": "TEXT", "shape": [2, 1], "datatype": "BYTES", "data": ["a", "b"]}
    assert len(build_targets("http://h:1", "serve", ["a", "b", "c", "d"], per_request=2)) == 2
    with pytest.raises(ValueError, match="unknown format"):
        build_target("http://h:1", "thrift", ["a"])


def test_vegeta_targets_round_trip(tmp_path):
    targets = [build_target("http://h:1", "serve", ["héllo"]), build_target("http://h:1", "kserve", ["x"])]
    path = tmp_path / "targets.json"
    write_vegeta_targets(targets, path)
    first = json.loads(path.read_text().splitlines()[0])
    assert base64.b64decode(first["body"]) == targets[0].body and first["header"]["content-type"] == [
        "application/json"
    ]
    assert read_vegeta_targets(path) == targets
    (tmp_path / "bad.json").write_text('{"method": "GET"}\n')
    with pytest.raises(ValueError, match="bad.json:1"):
        read_vegeta_targets(tmp_path / "bad.json")


def test_results_round_trip_in_vegeta_json(tmp_path):
    results = [
        Result(
            seq=i,
            timestamp=1_700_000_000.123456789 + i,
            latency=1_000_000 * (i + 1),
            code=200,
            bytes_in=10,
            bytes_out=5,
            url="http://h/x",
        )
        for i in range(3)
    ]
    path = tmp_path / "results.jsonl"
    write_results(results, path)
    line = json.loads(path.read_text().splitlines()[0])
    assert set(line) >= {"attack", "seq", "code", "timestamp", "latency", "bytes_out", "bytes_in", "error"}
    assert line["timestamp"].endswith("Z") and line["latency"] == 1_000_000
    back = read_results(path)
    assert [r.latency for r in back] == [r.latency for r in results]
    assert abs(back[0].timestamp - results[0].timestamp) < 1e-6


def test_report_fields_on_known_latencies():
    results = [
        Result(
            seq=i,
            timestamp=100.0 + i * 0.01,
            latency=(i + 1) * 1_000_000,
            code=200 if i % 10 else 503,
            bytes_in=100,
            bytes_out=10,
            error="" if i % 10 else "503 x",
        )
        for i in range(100)
    ]
    summary = summarize(results)
    assert summary["requests"] == 100
    assert summary["latencies"]["min"] == 1_000_000 and summary["latencies"]["max"] == 100_000_000
    # Latencies 1, 2, ..., 100 ms: the p-th percentile is the p-th value, read from the HDR histogram (its bucket's
    # upper bound: within 0.1%), and the report's percentile line shows the histogram's very values.
    for p in (50, 90, 95, 99):
        assert summary["latencies"][f"{p}th"] == summary["hdr"][str(p)]
        assert p * 1_000_000 <= summary["latencies"][f"{p}th"] <= p * 1_001_000
    assert summary["latencies"]["mean"] == 50_500_000
    assert summary["success"] == pytest.approx(0.9)
    assert summary["status_codes"] == {"200": 90, "503": 10}
    assert summary["rate"] == pytest.approx(100.0)
    assert abs(summary["hdr"]["50"] - 50_000_000) / 50_000_000 < 0.01
    text = text_report(summary)
    latencies_line = next(line for line in text.splitlines() if line.startswith("Latencies"))
    p99_in_line = latencies_line.split("]")[1].split(",")[5].strip()
    assert f"      99%  {p99_in_line}" in text, "one p99 in the report: the latency line's is the histogram's"
    assert "Requests      [total, rate, throughput]         100, 100.00" in text
    assert "Status Codes  [code:count]                      200:90  503:10" in text
    assert "503 x" in text


def one_result(seq: int, latency_ns: int) -> Result:
    return Result(seq=seq, timestamp=100.0 + seq * 0.01, latency=latency_ns, code=200, bytes_in=1, bytes_out=1)


@pytest.mark.parametrize("top_ms", [80.123456, 1.0, 1234.5678])
def test_no_percentile_exceeds_the_maximum(top_ms):
    """A tail whose largest value sits low in its histogram bucket: the bucket's upper bound (the histogram's raw
    answer for p99.9 and p100) lies above the maximum; the report caps every percentile at the measured maximum."""
    latencies = [int(1_000_000 * (1 + i % 50)) for i in range(2_000)] + [int(top_ms * 1_000_000)] * 3
    summary = summarize([one_result(i, v) for i, v in enumerate(latencies)])
    largest = summary["latencies"]["max"]
    assert largest == max(latencies)
    assert all(value <= largest for value in summary["hdr"].values()), summary["hdr"]
    assert summary["hdr"]["100"] == largest
    ordered = [summary["hdr"][key] for key in ("50", "75", "90", "95", "99", "99.9", "99.99", "100")]
    assert ordered == sorted(ordered)

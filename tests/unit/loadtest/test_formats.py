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
        build_target("http://h:1", "grpc", ["a"])


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
    # Latencies 1, 2, ..., 100 ms; percentiles interpolate linearly between order statistics (as numpy and Vegeta's
    # estimator do): p50 sits halfway between the 50th and 51st value, p99 at 98.01 of 99 steps: 99 + 0.01 ms.
    assert summary["latencies"]["50th"] == 50_500_000
    assert summary["latencies"]["90th"] == 90_100_000
    assert summary["latencies"]["99th"] == 99_010_000
    assert summary["latencies"]["mean"] == 50_500_000
    assert summary["success"] == pytest.approx(0.9)
    assert summary["status_codes"] == {"200": 90, "503": 10}
    assert summary["rate"] == pytest.approx(100.0)
    assert abs(summary["hdr"]["50"] - 50_000_000) / 50_000_000 < 0.01
    text = text_report(summary)
    assert "Requests      [total, rate, throughput]         100, 100.00" in text
    assert "Status Codes  [code:count]                      200:90  503:10" in text
    assert "503 x" in text

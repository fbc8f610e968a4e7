"""Reports over attack results: Vegeta's text and JSON report fields, every percentile from one HDR histogram."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import numpy as np
from hdrh.histogram import HdrHistogram

from loadtest.results import Result

HDR_PERCENTILES = (50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0)


def _stamp(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat().replace("+00:00", "Z")


def summarize(results: list[Result]) -> dict:
    """Vegeta's JSON report (`vegeta report -type=json`): durations in nanoseconds."""
    if not results:
        raise ValueError("no results to report")
    latencies = np.array([r.latency for r in results], dtype=np.int64)
    starts = np.array([r.timestamp for r in results])
    ends = starts + latencies / 1e9
    earliest, latest, end = float(starts.min()), float(starts.max()), float(ends.max())
    duration = latest - earliest
    ok = [r for r in results if 200 <= r.code < 400]
    success = len(ok) / len(results)
    total_time = end - earliest
    codes = Counter(str(r.code) for r in results)
    hdr = hdr_percentiles(latencies)
    return {
        "latencies": {
            "total": int(latencies.sum()),
            "mean": int(latencies.mean()),
            "50th": hdr["50"],
            "90th": hdr["90"],
            "95th": hdr["95"],
            "99th": hdr["99"],
            "max": int(latencies.max()),
            "min": int(latencies.min()),
        },
        "bytes_in": {
            "total": int(sum(r.bytes_in for r in results)),
            "mean": float(np.mean([r.bytes_in for r in results])),
        },
        "bytes_out": {
            "total": int(sum(r.bytes_out for r in results)),
            "mean": float(np.mean([r.bytes_out for r in results])),
        },
        "earliest": _stamp(earliest),
        "latest": _stamp(latest),
        "end": _stamp(end),
        "duration": int(duration * 1e9),
        "wait": int((end - latest) * 1e9),
        "requests": len(results),
        "rate": (len(results) - 1) / duration if duration > 0 else float(len(results)),
        "throughput": len(ok) / total_time if total_time > 0 else float(len(ok)),
        "success": success,
        "status_codes": dict(sorted(codes.items())),
        "errors": sorted({r.error for r in results if r.error}),
        "hdr": hdr,
    }


def hdr_percentiles(latencies_ns: np.ndarray, percentiles: tuple[float, ...] = HDR_PERCENTILES) -> dict[str, int]:
    """Latency percentiles from an HDR histogram (1 us to 1 h, 3 significant digits), in nanoseconds: the one source
    of every percentile a report shows. A histogram bucket reads as its upper bound, which can lie above the largest
    latency recorded in it; each value is capped at the measured maximum, so no percentile exceeds it (p100 is it)."""
    histogram = HdrHistogram(1, 3_600_000_000, 3)
    for value in latencies_ns:
        histogram.record_value(max(1, int(value) // 1000))
    largest = int(np.max(latencies_ns))
    return {f"{p:g}": min(int(histogram.get_value_at_percentile(p)) * 1000, largest) for p in percentiles}


def _duration(ns: float) -> str:
    """Go-style durations, as Vegeta prints them."""
    if ns >= 60e9:
        minutes, seconds = divmod(ns / 1e9, 60)
        return f"{int(minutes)}m{seconds:.3f}s"
    if ns >= 1e9:
        return f"{ns / 1e9:.3f}s"
    if ns >= 1e6:
        return f"{ns / 1e6:.3f}ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.3f}µs"
    return f"{int(ns)}ns"


def text_report(summary: dict) -> str:
    lat = summary["latencies"]
    lines = [
        f"Requests      [total, rate, throughput]         {summary['requests']}, {summary['rate']:.2f}, "
        f"{summary['throughput']:.2f}",
        f"Duration      [total, attack, wait]             {_duration(summary['duration'] + summary['wait'])}, "
        f"{_duration(summary['duration'])}, {_duration(summary['wait'])}",
        "Latencies     [min, mean, 50, 90, 95, 99, max]  "
        + ", ".join(_duration(lat[k]) for k in ("min", "mean", "50th", "90th", "95th", "99th", "max")),
        f"Bytes In      [total, mean]                     {summary['bytes_in']['total']}, "
        f"{summary['bytes_in']['mean']:.2f}",
        f"Bytes Out     [total, mean]                     {summary['bytes_out']['total']}, "
        f"{summary['bytes_out']['mean']:.2f}",
        f"Success       [ratio]                           {summary['success'] * 100:.2f}%",
        "Status Codes  [code:count]                      "
        + "  ".join(f"{c}:{n}" for c, n in summary["status_codes"].items()),
        "Error Set:",
        *summary["errors"],
        "HDR latency percentiles:",
        *(f"  {p:>6}%  {_duration(v)}" for p, v in summary["hdr"].items()),
    ]
    return "\n".join(lines)

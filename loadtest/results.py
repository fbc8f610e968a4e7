"""Per-request results with Vegeta's fields, written as Vegeta's JSON result lines (`vegeta encode --to json`)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Result:
    seq: int
    timestamp: float
    """When the request was due (open loop: its scheduled time, or when it began if that was earlier; closed loop:
    when it was sent), epoch seconds."""
    latency: int
    """Nanoseconds from `timestamp` to the end of the response, on a monotonic clock, never negative: queueing in the
    generator counts (no coordinated omission)."""
    code: int
    bytes_in: int
    bytes_out: int
    error: str = ""
    method: str = "POST"
    url: str = ""
    attack: str = ""
    retry_after: str | None = None
    """The Retry-After header of a 429 or 503 answer (Vegeta keeps response headers; this keeps only that one)."""

    def to_vegeta(self) -> dict:
        stamp = dt.datetime.fromtimestamp(self.timestamp, dt.UTC)
        nanos = int(round((self.timestamp % 1) * 1e9))
        text = stamp.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}Z"
        return {
            "attack": self.attack,
            "seq": self.seq,
            "code": self.code,
            "timestamp": text,
            "latency": self.latency,
            "bytes_out": self.bytes_out,
            "bytes_in": self.bytes_in,
            "error": self.error,
            "body": None,
            "method": self.method,
            "url": self.url,
            "headers": {"Retry-After": [self.retry_after]} if self.retry_after is not None else None,
        }

    @classmethod
    def from_vegeta(cls, item: dict) -> Result:
        text = item["timestamp"]
        whole, _, fraction = text.rstrip("Z").partition(".")
        seconds = dt.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC).timestamp()
        seconds += float("0." + fraction) if fraction else 0.0
        return cls(
            seq=item.get("seq", 0),
            timestamp=seconds,
            latency=int(item["latency"]),
            code=int(item["code"]),
            bytes_in=int(item.get("bytes_in", 0)),
            bytes_out=int(item.get("bytes_out", 0)),
            error=item.get("error") or "",
            method=item.get("method", ""),
            url=item.get("url", ""),
            attack=item.get("attack", ""),
            retry_after=((item.get("headers") or {}).get("Retry-After") or [None])[0],
        )


RESULTS_DIR = "results"
"""The run directory's folder of `loadtest attack` results, when no `--output` names a file."""


def new_results_file(run_dir: Path, now: dt.datetime | None = None) -> Path:
    """A new, empty file for one attack's results: `<run_dir>/results/attack-<UTC time>.jsonl`, with `-2`, `-3`...
    when another attack took that name in the same second."""
    folder = run_dir / RESULTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    stem = "attack-" + (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1, 1000):
        path = folder / (f"{stem}.jsonl" if n == 1 else f"{stem}-{n}.jsonl")
        try:
            path.open("x").close()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{folder} has 999 result files named {stem}: remove some")


def newest_results(run_dir: Path) -> Path | None:
    """The results file of the run directory's latest attack, or None."""
    found = sorted((run_dir / RESULTS_DIR).glob("attack-*.jsonl"), key=lambda p: p.stat().st_mtime_ns)
    return found[-1] if found else None


def write_results(results: Iterable[Result], path: Path) -> None:
    with open(path, "w") as out:
        for result in results:
            out.write(json.dumps(result.to_vegeta()) + "\n")


def read_results(path: Path) -> list[Result]:
    return [Result.from_vegeta(json.loads(line)) for line in Path(path).read_text().splitlines() if line.strip()]

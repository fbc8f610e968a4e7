"""Reading the run's logs back: every process the launcher starts in the background writes its output into one
directory (`run/logs/<service>.log`, rotated by size into `<service>.log.1` ... `.N`: `observability.logfile`), as
JSON lines when the stack runs with JSON logs (`serving up`'s default when detached); `serving logs` merges them, the
rotated files included, in time order and filters them by service, request id, trace id and age.
A line that is not JSON is kept as the message of an INFO entry of its file's service (with no time, it sorts first)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str) -> float:
    """'10m' -> seconds."""
    match = DURATION.match(text.strip())
    if not match:
        raise ValueError(f"--since takes a duration such as 30s, 10m, 2h or 1d, not '{text}'")
    return float(match.group(1)) * UNITS[match.group(2)]


def timestamp(entry: dict) -> float:
    try:
        return datetime.strptime(entry["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
    except (KeyError, ValueError):
        return 0.0


def parse_line(line: str, service: str) -> dict:
    try:
        entry = json.loads(line)
        if not isinstance(entry, dict):
            raise ValueError
    except ValueError:
        entry = {"msg": line.rstrip("\n"), "level": "INFO"}
    entry.setdefault("service", service)
    return entry


def matches(
    entry: dict, service: str | None, request_id: str | None, trace_id: str | None, since: float | None
) -> bool:
    if service and entry.get("service") != service:
        return False
    if request_id and entry.get("request_id") != request_id:
        return False
    if trace_id and entry.get("trace_id") != trace_id:
        return False
    return not (since is not None and timestamp(entry) < since)


ROTATED = re.compile(r"^(.+)\.log(?:\.(\d+))?$")
"""A log file's name: its service, and its place among the rotated files (none: the current one)."""


def log_files(log_dir: Path) -> list[tuple[Path, str]]:
    """Every log file in `log_dir` with its service, the oldest rotated file of each service first."""
    found = []
    for path in Path(log_dir).iterdir():
        match = ROTATED.match(path.name)
        if match and path.is_file():
            found.append((match.group(1), -int(match.group(2) or 0), path))
    return [(path, service) for service, _, path in sorted(found)]


def read(log_dir: Path, **filters: Any) -> list[dict]:
    entries = []
    for path, service in log_files(log_dir):
        with open(path, errors="replace") as handle:
            entries += [
                e for e in (parse_line(line, service) for line in handle if line.strip()) if matches(e, **filters)
            ]
    return sorted(entries, key=timestamp)


def completion_share(log_dir: Path) -> float | None:
    """The smallest share of successful requests that any server in the run logs its completion line for (each
    API worker says so when it starts: `ApiSettings.completion_log_sample`); None when none said."""
    everything = read(log_dir, service=None, request_id=None, trace_id=None, since=None)
    shares = [e["completion_log_sample"] for e in everything if isinstance(e.get("completion_log_sample"), float)]
    return min(shares, default=None)


def follow(log_dir: Path, filters: dict[str, Any], poll: float = 0.5) -> Iterator[dict]:
    """New lines of every log file as they are written (`--follow`), those `filters` (`matches`' arguments) keep."""
    positions = {path: path.stat().st_size for path in Path(log_dir).glob("*.log")}
    while True:
        for path in sorted(Path(log_dir).glob("*.log")):
            start = positions.get(path, 0)
            size = path.stat().st_size
            if size < start:  # truncated or replaced
                start = 0
            if size > start:
                with open(path, errors="replace") as handle:
                    handle.seek(start)
                    chunk = handle.read()
                positions[path] = start + len(chunk.encode())
                for line in chunk.splitlines():
                    entry = parse_line(line, path.stem)
                    if line.strip() and matches(entry, **filters):
                        yield entry
        time.sleep(poll)


def render(entry: dict) -> str:
    where = " ".join(
        f"{key}={entry[key]}"
        for key in ("request_id", "endpoint", "version", "run_id")
        if entry.get(key) not in (None, "-")
    )
    text = (
        f"{entry.get('ts', '-'):24} {entry.get('service', '-'):10} {entry.get('level', '-'):7} {entry.get('msg', '')}"
    )
    if where:
        text += f"  [{where}]"
    if entry.get("exc"):
        text += "\n" + entry["exc"]
    return text

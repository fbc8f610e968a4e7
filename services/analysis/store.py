"""The span store: one SQLite file in the run directory (queryable with any SQLite client), bounded in rows."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from services.analysis.spans import Span

SCHEMA = """
CREATE TABLE IF NOT EXISTS spans (
    trace_id TEXT NOT NULL, span_id TEXT NOT NULL, parent_id TEXT, service TEXT, name TEXT,
    start_ns INTEGER, end_ns INTEGER, attributes TEXT, events TEXT
);
CREATE INDEX IF NOT EXISTS spans_trace ON spans (trace_id);
"""


@dataclass(frozen=True)
class Progress:
    """What a store holds of a time window's spans, as they arrive."""

    spans: int
    newest_end_ns: int
    """When the newest of them ended (0: none)."""
    requests: int
    """Traced requests the load generator counted (its client spans)."""
    due: int
    """Traces still missing spans: one whose parent has not arrived, or a client span of an answered request with no
    server span under it (yet; or ever, for a caller's parent that is not stored)."""


INCOMPLETE_TRACES = """
SELECT count(DISTINCT s.trace_id) FROM spans s
WHERE s.start_ns BETWEEN ?1 AND ?2
AND EXISTS (SELECT 1 FROM spans r WHERE r.trace_id = s.trace_id AND r.end_ns >= ?3) AND (
    (coalesce(s.parent_id, '') != '' AND NOT EXISTS (
        SELECT 1 FROM spans p WHERE p.trace_id = s.trace_id AND p.span_id = s.parent_id))
    OR (s.service = 'loadtest'
        AND coalesce(json_extract(s.attributes, '$."error.type"'), '') = ''
        AND CAST(coalesce(json_extract(s.attributes, '$."http.response.status_code"'), 0) AS INTEGER) < 400
        AND NOT EXISTS (SELECT 1 FROM spans c WHERE c.trace_id = s.trace_id AND c.parent_id = s.span_id)))
"""
"""Traces of the window that still miss spans (`Progress.due`), among those with a span that ended at ?3 or later;
a failed request's client span (an error, a 4xx or 5xx status) needs no server span under it."""


class SpanStore:
    def __init__(self, path: Path, max_spans: int = 2_000_000):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_spans = max_spans
        self.db = sqlite3.connect(self.path, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(SCHEMA)
        self.count = self.db.execute("SELECT count(*) FROM spans").fetchone()[0]

    def add(self, spans: Iterable[Span]) -> int:
        rows = [
            (
                s.trace_id,
                s.span_id,
                s.parent_id,
                s.service,
                s.name,
                s.start_ns,
                s.end_ns,
                json.dumps(s.attributes, default=str),
                json.dumps(s.events),
            )
            for s in spans
        ]
        with self.db:
            self.db.executemany("INSERT INTO spans VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            self.count += len(rows)
            if self.count > self.max_spans:  # drop the oldest tenth: the disk stays bounded
                keep = int(self.max_spans * 0.9)
                self.db.execute("DELETE FROM spans WHERE rowid <= (SELECT max(rowid) FROM spans) - ?", (keep,))
                self.count = self.db.execute("SELECT count(*) FROM spans").fetchone()[0]
        return len(rows)

    def spans(self, since_ns: int = 0, until_ns: int | None = None) -> list[Span]:
        query = "SELECT * FROM spans WHERE start_ns >= ?"
        args: list = [since_ns]
        if until_ns is not None:
            query += " AND start_ns <= ?"
            args.append(until_ns)
        return [
            Span(t, s, p, svc, n, a, b, json.loads(attrs), json.loads(ev))
            for t, s, p, svc, n, a, b, attrs, ev in self.db.execute(query, args)
        ]

    def progress(self, since_ns: int = 0, until_ns: int | None = None, live_ns: int = 0) -> Progress:
        """What has arrived of the spans that started between `since_ns` and `until_ns` (`Progress`); traces still
        due only among those with a span that ended at `live_ns` or later."""
        bounds = (since_ns, until_ns if until_ns is not None else 2**63 - 1)
        count, newest = self.db.execute(
            "SELECT count(*), coalesce(max(end_ns), 0) FROM spans WHERE start_ns BETWEEN ? AND ?", bounds
        ).fetchone()
        (requests,) = self.db.execute(
            "SELECT count(*) FROM spans WHERE service = 'loadtest' AND start_ns BETWEEN ? AND ?", bounds
        ).fetchone()
        (due,) = self.db.execute(INCOMPLETE_TRACES, (*bounds, live_ns)).fetchone()
        return Progress(count, newest, requests, due)

    def close(self) -> None:
        self.db.close()

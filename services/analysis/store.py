"""The span store: one SQLite file in the run directory (queryable with any SQLite client), bounded in rows."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from services.analysis.spans import Span

SCHEMA = """
CREATE TABLE IF NOT EXISTS spans (
    trace_id TEXT NOT NULL, span_id TEXT NOT NULL, parent_id TEXT, service TEXT, name TEXT,
    start_ns INTEGER, end_ns INTEGER, attributes TEXT, events TEXT
);
CREATE INDEX IF NOT EXISTS spans_trace ON spans (trace_id);
"""


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

    def close(self) -> None:
        self.db.close()

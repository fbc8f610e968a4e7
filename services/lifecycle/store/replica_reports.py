"""The replicas' reports in the state store's second table: what each Triton replica holds ready, and when it said
so (`DeploymentStore.report_replica` and `replicas`, which check the store first)."""

from __future__ import annotations

import json
import logging

from pydantic import TypeAdapter
from sqlalchemy import Engine, case, func, select

from services.common.names import printable
from services.lifecycle.store.db import REPLICAS, upsert

log = logging.getLogger(__name__)
HELD = TypeAdapter(dict[str, list[str]])
"""What a report holds: endpoint name -> the versions ready."""
LARGEST_REPORT = 1 << 20
"""Bytes of one replica's report at most (a report names the versions of each endpoint it holds)."""
MOST_SAID = 1000
_said: set[tuple[str, str]] = set()
_said_too_many: list[bool] = []


def report(engine: Engine, replica: str, ready: dict[str, list[str]], now: float) -> None:
    """What `replica` holds ready now (endpoint -> versions), replacing its previous report."""
    document = json.dumps({name: sorted(set(v), key=_by_number) for name, v in sorted(ready.items())})
    statement = upsert(engine, REPLICAS).values(replica=replica, ready=document, reported_at=now)
    statement = statement.on_conflict_do_update(
        index_elements=[REPLICAS.c.replica], set_={"ready": document, "reported_at": now}
    )
    with engine.begin() as conn:
        conn.execute(statement)


def recent(engine: Engine, now: float, ttl: float) -> dict[str, dict[str, list[str]]]:
    """The replicas that reported within `ttl` seconds of `now` (before it, or after it by a clock ahead by less than
    `ttl`), with what each holds ready. A report from further ahead (or at NaN), over `LARGEST_REPORT` bytes, or whose
    content is no map of endpoint names to version lists, is left out and said once: it would otherwise hold every
    new version back for ever, or stall each tick."""
    size = func.length(REPLICAS.c.ready)
    query = select(
        REPLICAS.c.replica,
        REPLICAS.c.reported_at,
        size.label("size"),
        case((size <= LARGEST_REPORT, REPLICAS.c.ready), else_=None).label("ready"),
    ).where(REPLICAS.c.reported_at >= now - ttl)
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    found = {}
    for row in rows:
        try:
            if not row.reported_at <= now + ttl:  # NaN too
                raise ValueError(f"reported at {row.reported_at!r}, ahead of this host's clock ({now:.0f})")
            if row.ready is None:
                raise ValueError(f"{row.size} bytes, over {LARGEST_REPORT}")
            found[row.replica] = HELD.validate_json(row.ready)
        except (ValueError, TypeError) as error:  # pydantic's ValidationError is a ValueError
            _say_once(row.replica, row.reported_at, error)
    return found


def _say_once(replica: str, reported_at: object, error: Exception) -> None:
    """One line for each report left out (up to `MOST_SAID` of them; past that, one line says the rest are not)."""
    key = (replica, repr(reported_at))
    if key in _said:
        return
    if len(_said) < MOST_SAID:
        _said.add(key)
        log.warning("replica %s's report is left out: %s", printable(replica), printable(error, 300))
    elif not _said_too_many:
        _said_too_many.append(True)
        log.warning("more than %d replica reports were left out; the others are left out without a line", MOST_SAID)


def _by_number(version: str) -> tuple[int, str]:
    return (len(version), version)

"""The replicas' reports in the state store's second table: what each Triton replica holds ready, and when it said
so (`DeploymentStore.report_replica` and `replicas`, which check the store first)."""

from __future__ import annotations

import json
import logging

from pydantic import TypeAdapter
from sqlalchemy import Engine, select

from services.common.names import printable
from services.lifecycle.state_db import REPLICAS, upsert

log = logging.getLogger(__name__)
HELD = TypeAdapter(dict[str, list[str]])
"""What a report holds: endpoint name -> the versions ready."""
_said: set[tuple[str, float]] = set()


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
    `ttl`), with what each holds ready. A report from further ahead, or whose content is no map of endpoint names to
    version lists, is left out and said once: it would otherwise hold every new version back for ever."""
    with engine.connect() as conn:
        rows = conn.execute(select(REPLICAS).where(REPLICAS.c.reported_at >= now - ttl)).all()
    found = {}
    for row in rows:
        try:
            if not row.reported_at <= now + ttl:
                raise ValueError(f"reported at {row.reported_at!r}, ahead of this host's clock ({now:.0f})")
            found[row.replica] = HELD.validate_json(row.ready)
        except (ValueError, TypeError) as error:  # pydantic's ValidationError is a ValueError
            if (row.replica, row.reported_at) not in _said:
                if len(_said) > 1000:
                    _said.clear()
                _said.add((row.replica, row.reported_at))
                log.warning("replica %s's report is left out: %s", printable(row.replica), printable(error, 300))
    return found


def _by_number(version: str) -> tuple[int, str]:
    return (len(version), version)

"""The replicas' reports in the state store's second table: what each Triton replica holds ready, and when it said
so (`DeploymentStore.report_replica` and `replicas`, which check the store first)."""

from __future__ import annotations

import json

from sqlalchemy import Engine, select

from services.lifecycle.state_db import REPLICAS, upsert


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
    """The replicas that reported within `ttl` seconds before `now`, with what each holds ready."""
    with engine.connect() as conn:
        rows = conn.execute(select(REPLICAS).where(REPLICAS.c.reported_at >= now - ttl)).all()
    return {row.replica: json.loads(row.ready) for row in rows}


def _by_number(version: str) -> tuple[int, str]:
    return (len(version), version)

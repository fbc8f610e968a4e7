"""Under the deployment state store, as an operator with a SQL shell would reach it: write a document the schema
refuses (hand-edited, cut short), and read the stored row as it is."""

from __future__ import annotations

from sqlalchemy import select, update

from services.lifecycle.state import DeploymentStore
from services.lifecycle.state_db import DOCUMENT


def write_document(store: DeploymentStore, text: str) -> None:
    """`text` stored as the state, as a new revision (what a gateway or controller notices)."""
    store.revision()  # the tables and the row exist
    change = update(DOCUMENT).where(DOCUMENT.c.id == 1).values(document=text, revision=DOCUMENT.c.revision + 1)
    with store.engine.begin() as conn:
        conn.execute(change)


def stored(store: DeploymentStore) -> tuple[int, str]:
    """The stored revision and document, unparsed."""
    store.revision()
    with store.engine.connect() as conn:
        row = conn.execute(select(DOCUMENT.c.revision, DOCUMENT.c.document).where(DOCUMENT.c.id == 1)).one()
    return row.revision, row.document

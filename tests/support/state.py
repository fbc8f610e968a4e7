"""Under the deployment state store, as an operator with a SQL shell would reach it: write a document the schema
refuses (hand-edited, cut short), and read the stored row as it is; and the state an attacker who can write the store
(or hand an operator a backup) would write."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from sqlalchemy import select, update

from services.lifecycle.store import DeploymentStore
from services.lifecycle.store.db import DOCUMENT


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


def escaping(directory: Path, version: str = "important", phase: str = "draining") -> str:
    """A state document as an attacker writes it: one endpoint named `../../...<directory>` (enough `..` to leave any
    base directory, then `directory`) whose version `version` is `phase` since the epoch. A controller that took it
    would unload that version, deleting `<directory>/<version>` (`TritonModels.remove`, its copy's removal); an agent
    would fetch into and place files under it."""
    name = "../" * 24 + str(Path(directory).resolve()).lstrip("/")
    record = {"version": version, "state": phase, "drain_started": 0}
    return json.dumps({"endpoints": {name: {"versions": {version: record}}}})


def victim_dir(base: Path) -> Path:
    """A directory no process of the stack has business with, `base/victim`, holding `important/keep`: what an
    `escaping` state aims at."""
    (base / "victim" / "important").mkdir(parents=True)
    (base / "victim" / "important" / "keep").write_text("kept")
    return base / "victim"


def controllers_copy(models_dir: Path, endpoint: str, version: str, model_dir: Path) -> Path:
    """`model_dir` as the controller's fetched copy of `version` of `endpoint` in its models directory `models_dir`,
    where a gateway of its host reads it (`GATEWAY_CONTROLLER_MODELS_DIR`); returns the copy."""
    target = Path(models_dir) / endpoint / version / "model"
    shutil.copytree(model_dir, target)
    return target

"""Deployment state: which registry versions each endpoint has, in which state, with which traffic policy; and which
versions each Triton replica holds ready.

The desired state is one JSON document with a revision number, in a database every process reaches
(`SERVING_STATE_URL`): embedded SQLite under the run directory by default (`make up` starts no extra server),
PostgreSQL for a fleet (the registry's database server, tables of its own). The controller and the admin API change it
with `DeploymentStore.update` (compare-and-swap on the revision, retried); gateway workers poll `revision()` and rebuild
their endpoints when it moved, so a traffic change reaches every worker within a poll interval and no request waits
for it.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError
from sqlalchemy import Engine, select, update
from sqlalchemy.engine import URL

from services.common.contract import TensorSpec
from services.common.errors import ConfigurationError, Unavailable
from services.lifecycle.state_db import (
    DOCUMENT,
    REPLICAS,
    StateStoreUnavailable,
    create_tables,
    open_engine,
    parse_url,
    reachable,
    sqlite_path,
    upsert,
)

__all__ = ["Deployments", "DeploymentStore", "EndpointState", "Rollout", "StateStoreUnavailable", "VersionState"]
log = logging.getLogger(__name__)
LEGACY_FILE = "deployments.json"
"""The state file of earlier releases, imported once into an empty SQLite store beside it."""
VersionPhase = Literal["loading", "live", "draining", "rejected"]
T = TypeVar("T")


class VersionState(BaseModel):
    version: str
    """The registry version; also the version directory in Triton's model repository."""
    state: VersionPhase = "loading"
    model_dir: str | None = None
    """Local copy of the version's artifacts (manifest, tokenizer, ONNX file), once fetched."""
    reason: str | None = None
    """Why it was rejected, or why a rollout rolled it back."""
    deployed_at: str | None = None
    drain_started: float | None = None
    lineage: dict = Field(default_factory=dict)
    """Registry name and version, run ids and URLs, data set, artifact hashes (see `services.registry`)."""


class Rollout(BaseModel):
    version: str
    stable: str
    steps: list[int] = Field(min_length=1)
    """Traffic percentages for the new version, in order; the last one should be 100."""
    dwell: float = Field(gt=0)
    max_error_rate: float = Field(ge=0, le=1)
    max_p99_ratio: float = Field(gt=0)
    min_requests: int = Field(20, ge=1)
    """Requests each version must have answered in a dwell window before it is judged."""
    step: int = 0
    step_started: float | None = None
    baseline: dict | None = None
    """The gateway's per-version counters when the step started (a `rollout.Snapshot`): kept here so that a
    restarted controller judges the same window."""
    status: Literal["running", "promoted", "rolled_back"] = "running"
    outcome: str | None = None


class EndpointState(BaseModel):
    registered_name: str | None = None
    """MLflow registered model whose new versions are deployed automatically (`serving model auto-update`)."""
    max_versions: int = Field(2, ge=1)
    """Live versions kept; older ones are drained and unloaded."""
    contract_inputs: list[TensorSpec] = Field(default_factory=list)
    contract_outputs: list[TensorSpec] = Field(default_factory=list)
    """The endpoint's tensor contract, fixed by its first version: a version that differs is rejected."""
    versions: dict[str, VersionState] = Field(default_factory=dict)
    weights: dict[str, float] = Field(default_factory=dict)
    """Canary split by version (`serving model canary --versions`); empty: the newest live version takes all."""
    newest_weights: list[float] = Field(default_factory=list)
    """Canary split over the newest live versions (`--newest N`), newest first."""
    rollout: Rollout | None = None
    removed: list[str] = Field(default_factory=list)
    """Versions taken out with `serving model remove`: auto-update never deploys them again (a newer registry version
    still comes in)."""

    def live(self) -> list[str]:
        """Live versions, newest first."""
        return sorted((v for v, s in self.versions.items() if s.state == "live"), key=int, reverse=True)


class Deployments(BaseModel):
    endpoints: dict[str, EndpointState] = Field(default_factory=dict)


class DeploymentStore:
    """The desired state and the replicas' reports in a database; the state changed only through `update`."""

    ATTEMPTS = 50
    """Compare-and-swap rounds one `update` gets while other writers keep winning (each round waits a little more)."""

    def __init__(self, url: URL, engine: Engine):
        self.url = url.render_as_string(hide_password=True)
        """The store's URL as logs and messages show it (no password)."""
        self.engine = engine
        path = sqlite_path(url)
        self._legacy = path.parent / LEGACY_FILE if path is not None else None
        self._ready = False
        self._ready_lock = threading.Lock()

    @classmethod
    def open(cls, url: str) -> DeploymentStore:
        """The store at `url` (`sqlite:///<path>` or `postgresql+psycopg2://...`); a bad URL is a ConfigurationError.
        Nothing is connected yet: the tables are created (if missing) on first use, so a store that is down now
        fails the first call (`StateStoreUnavailable`), not the caller's start."""
        parsed = parse_url(url)
        return cls(parsed, open_engine(parsed))

    def close(self) -> None:
        self.engine.dispose()

    def read(self) -> Deployments:
        return self._parse(*self._row())

    def endpoint(self, name: str) -> EndpointState | None:
        return self.read().endpoints.get(name)

    def revision(self) -> int:
        """The state's revision: one query, grows with every change (0: never written)."""
        self._ensure()
        with reachable(self.url), self.engine.connect() as conn:
            return conn.execute(select(DOCUMENT.c.revision).where(DOCUMENT.c.id == 1)).scalar() or 0

    def update(self, change: Callable[[Deployments], T]) -> T:
        """Read, apply `change` (which may raise to abort: nothing is written), write if the revision is still the
        one read; else read again and apply `change` again to the newer state (so `change` may run several times,
        each time on a fresh state). A change that changes nothing writes nothing (the revision stays)."""
        for attempt in range(self.ATTEMPTS):
            revision, document = self._row()
            state = self._parse(revision, document)
            before = _dump(state)
            result = change(state)
            after = _dump(state)
            if after == before or self._swap(revision, after):
                return result
            time.sleep(random.uniform(0, 0.001 * 2 ** min(attempt, 5)))
        raise Unavailable(f"the deployment state changed under {self.ATTEMPTS} tries of one update; try again")

    def report_replica(self, replica: str, ready: dict[str, list[str]], now: float) -> None:
        """What `replica` holds ready now (endpoint -> versions), replacing its previous report."""
        self._ensure()
        document = json.dumps({name: sorted(set(v), key=_by_number) for name, v in sorted(ready.items())})
        statement = upsert(self.engine, REPLICAS).values(replica=replica, ready=document, reported_at=now)
        statement = statement.on_conflict_do_update(
            index_elements=[REPLICAS.c.replica], set_={"ready": document, "reported_at": now}
        )
        with reachable(self.url), self.engine.begin() as conn:
            conn.execute(statement)

    def replicas(self, now: float, ttl: float) -> dict[str, dict[str, list[str]]]:
        """The replicas that reported within `ttl` seconds before `now`, with what each holds ready."""
        self._ensure()
        with reachable(self.url), self.engine.connect() as conn:
            rows = conn.execute(select(REPLICAS).where(REPLICAS.c.reported_at >= now - ttl)).all()
        return {row.replica: json.loads(row.ready) for row in rows}

    def _row(self) -> tuple[int, str]:
        self._ensure()
        return self._fetch()

    def _fetch(self) -> tuple[int, str]:
        with reachable(self.url), self.engine.connect() as conn:
            row = conn.execute(select(DOCUMENT.c.revision, DOCUMENT.c.document).where(DOCUMENT.c.id == 1)).first()
        if row is None:  # deleted by hand: not an empty state (every gateway would drop its endpoints)
            raise ConfigurationError(f"the deployment state's row is missing from table {DOCUMENT.name}")
        return row.revision, row.document

    def _swap(self, revision: int, document: str) -> bool:
        """Write `document` as revision + 1 if the stored revision is still `revision`; False if another won."""
        statement = (
            update(DOCUMENT)
            .where(DOCUMENT.c.id == 1, DOCUMENT.c.revision == revision)
            .values(revision=revision + 1, document=document)
        )
        with reachable(self.url), self.engine.begin() as conn:
            return conn.execute(statement).rowcount == 1

    def _parse(self, revision: int, document: str) -> Deployments:
        try:
            return Deployments.model_validate_json(document)
        except (ValidationError, ValueError) as error:
            raise ConfigurationError(f"the deployment state (revision {revision}) is invalid: {error}") from None

    def _ensure(self) -> None:
        """The tables and the state's row, created on first use if missing; the old state file imported once."""
        if self._ready:
            return
        with self._ready_lock:
            if self._ready:
                return
            with reachable(self.url):
                create_tables(self.engine, _dump(Deployments()))
            self._import_legacy_file()
            self._ready = True

    def _import_legacy_file(self) -> None:
        if self._legacy is None or not self._legacy.is_file() or self._fetch()[0] != 0:
            return
        try:
            state = Deployments.model_validate_json(self._legacy.read_text())
        except (ValidationError, ValueError, OSError) as error:
            log.error("%s not imported into the state store %s: %s", self._legacy, self.url, error)
            return
        if self._swap(0, _dump(state)):
            log.warning(
                "imported the deployment state of %s (%d endpoints) into %s; the file is not read any more",
                self._legacy,
                len(state.endpoints),
                self.url,
            )


def _dump(state: Deployments) -> str:
    return json.dumps(state.model_dump(exclude_none=True), separators=(",", ":"))


def _by_number(version: str) -> tuple[int, str]:
    return (len(version), version)

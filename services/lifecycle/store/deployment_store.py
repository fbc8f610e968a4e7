"""`DeploymentStore`: the deployment state in a database, read validated and changed only through `update`
(compare-and-swap on the revision); the replicas' reports beside it."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TypeVar

from sqlalchemy import Engine, select, update
from sqlalchemy.engine import URL

from services.common.errors import ConfigurationError, InvalidInput, Unavailable
from services.lifecycle.deployments import Deployments, EndpointState, StateInvalid, checked_counts, dump, parse
from services.lifecycle.store import replica_reports
from services.lifecycle.store.db import (
    DOCUMENT,
    StateLost,
    add_epoch_column,
    create_sqlite_file,
    create_tables,
    open_engine,
    parse_url,
    reachable,
    shape,
    shown,
    sqlite_path,
)
from services.lifecycle.store.memory import StateMemory, last_good_file
from services.lifecycle.store.rules import Lost, Stamp, check_not_older, may_create

log = logging.getLogger(__name__)
T = TypeVar("T")


class DeploymentStore:
    """The desired state and the replicas' reports in a database; the state changed only through `update`."""

    ATTEMPTS = 50
    """Compare-and-swap rounds one `update` gets while other writers keep winning (each round waits a little more)."""

    def __init__(self, url: URL, engine: Engine, memory: StateMemory):
        self.url = shown(url)
        """The store's URL as logs and messages show it (no password, in its userinfo or its query)."""
        self.engine = engine
        self.backend = engine.dialect.name
        self.memory = memory
        """The newest state this process (with a SQLite store: this host) read from the store."""
        self.path = sqlite_path(url)
        self._ready = False
        self._ready_lock = threading.Lock()

    @classmethod
    def open(cls, url: str) -> DeploymentStore:
        """The store at `url` (`sqlite:///<path>` or `postgresql+psycopg2://...`); a bad URL is a ConfigurationError.
        Nothing is connected yet: the tables are created on first use where the store is new (`rules`), so a
        store that is down now fails the first call (`StateStoreUnavailable`), not the caller's start. A SQLite
        store's memory is the file beside it (`memory`); a PostgreSQL store's, the process's own."""
        parsed = parse_url(url)
        path = sqlite_path(parsed)
        return cls(parsed, open_engine(parsed), StateMemory(last_good_file(path) if path is not None else None))

    def close(self) -> None:
        self.engine.dispose()

    def read(self) -> Deployments:
        return self._parse(*self._row())

    def current(self) -> tuple[Stamp, Deployments]:
        """The state and its stamp, read together (one query) and validated."""
        stamp, document = self._row()
        return stamp, self._parse(stamp, document)

    def endpoint(self, name: str) -> EndpointState | None:
        return self.read().endpoints.get(name)

    def stamp(self) -> Stamp:
        """The state's restore epoch and revision: one query; raises `StateLost` where older than one seen."""
        self._ensure()
        seen = self.memory.seen()
        with self._reachable(), self.engine.connect() as conn:
            row = conn.execute(select(DOCUMENT.c.epoch, DOCUMENT.c.revision).where(DOCUMENT.c.id == 1)).first()
        stamp = Stamp(*checked_counts(row.epoch, row.revision)) if row is not None else Stamp(0, 0)
        self._check(stamp, seen)
        return stamp

    def revision(self) -> int:
        """The state's revision: grows with every change (0: never written)."""
        return self.stamp().revision

    def remembered(self) -> tuple[Stamp, Deployments] | None:
        """The newest state this process or host read, as it read it (None: none, or no longer valid)."""
        found = self.memory.remembered()
        if found is None:
            return None
        try:
            return found[0], parse(found[1])
        except StateInvalid:
            return None

    def update(self, change: Callable[[Deployments], T]) -> T:
        """Read, apply `change` (which may raise to abort: nothing is written), write if the state is still the one
        read; else read again and apply `change` again to the newer state (so `change` may run several times, each
        time on a fresh state). A change that changes nothing writes nothing (the revision stays); one that would
        leave a state that breaks a rule writes nothing either (InvalidInput naming the fields)."""
        for attempt in range(self.ATTEMPTS):
            stamp, document = self._row()
            state = self._parse(stamp, document, persist=False)
            before = dump(state)
            result = change(state)
            after = dump(state)
            if after == before:
                return result
            try:
                parse(after)
            except StateInvalid as invalid:
                raise InvalidInput(
                    f"nothing written: the change would make the deployment state invalid: {invalid.problems}"
                ) from None
            if self._swap(stamp, after):
                return result
            time.sleep(random.uniform(0, 0.001 * 2 ** min(attempt, 5)))
        raise Unavailable(f"the deployment state changed under {self.ATTEMPTS} tries of one update; try again")

    def report_replica(self, replica: str, ready: dict[str, list[str]], now: float) -> None:
        """What `replica` holds ready now (endpoint -> versions), replacing its previous report."""
        self._ensure()
        with self._reachable():
            replica_reports.report(self.engine, replica, ready, now)

    def replicas(self, now: float, ttl: float) -> dict[str, dict[str, list[str]]]:
        """The replicas that reported within `ttl` seconds before `now`, with what each holds ready."""
        self._ensure()
        with self._reachable():
            return replica_reports.recent(self.engine, now, ttl)

    def _reachable(self, preparing: bool = False) -> AbstractContextManager[None]:
        return reachable(self.url, self.backend, preparing)

    def _check(self, stamp: Stamp, seen: Stamp | None) -> None:
        """`seen` is taken before the query that read `stamp`: a change this process (another thread) committed and
        recorded meanwhile is newer than this read, not a sign that the store went back."""
        try:
            check_not_older(stamp, seen, self.backend)
        except Lost as lost:
            raise StateLost(self.url, lost) from None

    def _row(self) -> tuple[Stamp, str]:
        self._ensure()
        seen = self.memory.seen()
        stamp, document = self._fetch()
        self._check(stamp, seen)
        return stamp, document

    def _fetch(self) -> tuple[Stamp, str]:
        columns = DOCUMENT.c.epoch, DOCUMENT.c.revision, DOCUMENT.c.document
        with self._reachable(), self.engine.connect() as conn:
            row = conn.execute(select(*columns).where(DOCUMENT.c.id == 1)).first()
        if row is None:  # deleted by hand: not an empty state (every gateway would drop its endpoints)
            raise ConfigurationError(f"the deployment state's row is missing from table {DOCUMENT.name}")
        return Stamp(*checked_counts(row.epoch, row.revision)), row.document

    def _swap(self, stamp: Stamp, document: str) -> bool:
        """Write `document` as the next revision if the stored state is still `stamp`; False if another won. A next
        revision past the bound is refused (`StateInvalid`): no process would read it."""
        checked_counts(stamp.epoch, stamp.revision + 1, "the deployment state has no revision left; nothing changed")
        statement = (
            update(DOCUMENT)
            .where(DOCUMENT.c.id == 1, DOCUMENT.c.epoch == stamp.epoch, DOCUMENT.c.revision == stamp.revision)
            .values(revision=stamp.revision + 1, document=document)
        )
        with self._reachable(), self.engine.begin() as conn:
            swapped = conn.execute(statement).rowcount == 1
        if swapped:
            self.memory.record(Stamp(stamp.epoch, stamp.revision + 1), document)
        return swapped

    def _parse(self, stamp: Stamp, document: str, *, persist: bool = True) -> Deployments:
        """The state, validated whole before it is remembered: `StateInvalid` where it breaks a rule."""
        state = parse(document, f"the deployment state ({stamp}) is invalid")
        self.memory.record(stamp, document, persist=persist)
        return state

    def _ensure(self) -> None:
        """On first use: the store created where it is new, refused where it lost its state (`rules`); the
        epoch column added to a store made before it."""
        if self._ready:
            return
        with self._ready_lock:
            if self._ready:
                return
            with self._reachable(preparing=True):
                self._create_or_check()
                add_epoch_column(self.engine)
            self._ready = True

    def _create_or_check(self) -> None:
        seen = self.memory.seen()  # before the shape: another process may create the store and record it between
        try:
            create = may_create(shape(self.engine, self.path), seen, self.backend)
        except Lost as lost:
            raise StateLost(self.url, lost) from None
        if create and self.path is not None:
            create_sqlite_file(self.path, dump(Deployments()))
        elif create:
            create_tables(self.engine, dump(Deployments()))

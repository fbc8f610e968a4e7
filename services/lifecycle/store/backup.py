"""Backup and restore of the deployment state, and the operator's word that the store's state is the one to follow
(`serving state backup|restore|accept`). Backup and restore move the state's row, never a database file.

A backup is a new SQLite file this module makes with the store's own schema (`db`'s tables), holding one row:
the state's restore epoch, revision and document, read from the live store (SQLite or PostgreSQL) in one query and
valid. A restore opens a backup read-only, with SQLite's defences for a file from elsewhere (`trusted_schema` off,
`query_only`), and reads that row alone, from a table (whatever else the file holds, triggers, views, other tables,
is never read and never copied); the state is validated whole (`deployments.parse`: a backup that breaks a rule is
refused, naming the field), given a new restore epoch above every epoch seen (`rules.next_epoch`), keeps its
revision, and is written into the live store: for SQLite, a fresh store file made here holds the row and is copied
over the live database in one transaction (over a file that is not a database any more, in its place), so that the
live file holds exactly what this project creates; for PostgreSQL, the row is written in one transaction (the tables
created where they are gone). Every process, having seen a later revision of an older epoch, takes it. Backups made
before (a copy of the whole store file) hold the same table and are restored the same way.

`accept` gives the state the store holds now a new epoch (a file put back by hand, a `pg_restore`), once it is
valid."""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import create_engine, exc
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from services.common.errors import ConfigurationError
from services.common.private import narrow, private_file
from services.lifecycle.deployments import (
    RESTORE_ABOVE_MS,
    Deployments,
    StateInvalid,
    checked_counts,
    dump,
    epoch_ahead,
    parse,
)
from services.lifecycle.store.db import (
    BUSY_TIMEOUT,
    DOCUMENT,
    REPLICAS,
    SQLITE_HEADER,
    add_epoch_column,
    create_sqlite_file,
    create_tables,
    metadata,
    reachable,
    shape,
)
from services.lifecycle.store.deployment_store import DeploymentStore
from services.lifecycle.store.rules import Stamp, next_epoch

BACKUP_READ = ("PRAGMA trusted_schema=OFF", "PRAGMA query_only=ON", "PRAGMA cell_size_check=ON")
"""How a backup file is opened (besides read-only): its schema's views, triggers and generated columns may call no
function with side effects, nothing is written through the connection, and a damaged page is an error."""


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Summary:
    """A state as a command reports it."""

    stamp: Stamp
    endpoints: int

    def __str__(self) -> str:
        return f"{self.stamp} ({self.endpoints} endpoints)"


def backup(store: DeploymentStore, target: Path, *, overwrite: bool = False) -> Summary:
    """The store's state row into a new backup file `target`; refuses a store that lost its state (there is nothing
    to keep) or whose state is invalid (`StateInvalid`)."""
    if target.exists() and not overwrite:
        raise ConfigurationError(f"{target} exists; pass --force to replace it, or name another file")
    if not target.parent.is_dir():
        raise ConfigurationError(f"{target.parent} is no directory; make it first, or name a file in one")
    stamp, state = store.current()
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    try:
        _write_backup(partial, stamp, dump(state))
        summary = inspect_backup(partial)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return summary


def restore(store: DeploymentStore, source: Path, *, now_ms: int | None = None) -> tuple[Summary, str]:
    """Put the state of backup `source` into the store at a new restore epoch; returns it and what it replaced."""
    found, state = read_backup(source)
    stamp = Stamp(next_epoch(now_ms or _now_ms(), found.epoch, *_epochs_known(store)), found.revision)
    checked_counts(*stamp, "the restored state's stamp would be invalid; nothing restored", RESTORE_ABOVE_MS + 1)
    if store.path is not None:
        replaced = _restore_sqlite(store, store.path, stamp, dump(state))
        narrow(store.path)  # a store an older run left readable by others
    else:
        replaced = _restore_tables(store, stamp, dump(state))
    _remember(store)
    return Summary(stamp, len(state.endpoints)), replaced


def accept(store: DeploymentStore, *, now_ms: int | None = None) -> Summary:
    """Give the store's state as it is now a new restore epoch; refuses an invalid one, or a store without tables."""
    with reachable(store.url, store.backend):
        if shape(store.engine, store.path) != "tables":
            raise ConfigurationError(f"{store.url} has no state to accept; restore a backup instead")
        add_epoch_column(store.engine)
        return _accept(store, now_ms or _now_ms())


def _accept(store: DeploymentStore, now_ms: int) -> Summary:
    columns = DOCUMENT.c.epoch, DOCUMENT.c.revision, DOCUMENT.c.document
    with store.engine.begin() as conn:
        row = conn.execute(DOCUMENT.select().with_only_columns(*columns).where(DOCUMENT.c.id == 1)).first()
        if row is None:
            raise ConfigurationError(f"{store.url} has no state to accept (its row is missing); restore a backup")
        lead = f"the state in {store.url} is not a valid deployment state; nothing accepted"
        checked_counts(row.epoch, row.revision, lead)
        state = parse(row.document, lead)
        epoch = next_epoch(now_ms, row.epoch, *_epochs_known(store))
        lead = "the accepted state's stamp would be invalid; nothing accepted"
        checked_counts(epoch, row.revision, lead, RESTORE_ABOVE_MS + 1)
        conn.execute(DOCUMENT.update().where(DOCUMENT.c.id == 1).values(epoch=epoch))
    _remember(store)
    return Summary(Stamp(epoch, row.revision), len(state.endpoints))


def _remember(store: DeploymentStore) -> None:
    """Read the state just written, so that this host remembers it as the newest it saw; one whose epoch went above
    another host's, minutes ahead of this clock, is taken by this host's readers once the clock has caught up."""
    try:
        store.read()
    except StateInvalid as ahead:
        log.warning("%s", ahead)


def inspect_backup(source: Path) -> Summary:
    """The state a backup file holds, checked whole (`read_backup`)."""
    stamp, state = read_backup(source)
    return Summary(stamp, len(state.endpoints))


def read_backup(source: Path) -> tuple[Stamp, Deployments]:
    """The state row of backup file `source` (its stamp and state), read alone and validated; a file that is not a
    backup, or whose state breaks a rule, is a ConfigurationError saying why (which field)."""
    if not source.is_file():
        raise ConfigurationError(f"{source} is not a file")
    with source.open("rb") as file:
        if file.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
            raise ConfigurationError(f"{source} is not a SQLite database (a backup made by `serving state backup`)")
    try:
        with _open(source, "ro") as conn:
            for pragma in BACKUP_READ:
                conn.execute(pragma)
            check = conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise ConfigurationError(f"{source} is damaged (SQLite's quick_check: {str(check)[:200]})")
            row = _state_row(conn, source)
    except sqlite3.DatabaseError as error:
        raise ConfigurationError(f"{source} is not a usable backup: {error}") from None
    if row is None:
        raise ConfigurationError(f"{source} holds no deployment state (table {DOCUMENT.name} has no row)")
    epoch, revision, document = row
    checked_counts(epoch, revision, f"{source} is not a valid deployment state")
    if not isinstance(document, str):
        raise ConfigurationError(f"{source}: the state's document is not text")
    return Stamp(epoch, revision), parse(document, f"{source} is not a valid deployment state")


def _state_row(conn: sqlite3.Connection, source: Path) -> tuple | None:
    """The row of the state table, read only where that table is a table (not a view) with the store's columns."""
    found = conn.execute("SELECT type FROM sqlite_master WHERE name = ?", (DOCUMENT.name,)).fetchone()
    if found is None:
        raise ConfigurationError(f"{source} is not a usable backup: no such table: {DOCUMENT.name}")
    if found[0] != "table":
        raise ConfigurationError(f"{source} is not a usable backup: {DOCUMENT.name} is a {found[0]}, not a table")
    columns = {row[1] for row in conn.execute(f"PRAGMA table_info({DOCUMENT.name})")}
    if not {"id", "revision", "document"} <= columns:
        raise ConfigurationError(f"{source} is not a usable backup: {DOCUMENT.name} lacks the store's columns")
    epoch = "epoch" if "epoch" in columns else "0"  # a backup made before restore epochs: its state is of epoch 0
    return conn.execute(f"SELECT {epoch}, revision, document FROM {DOCUMENT.name} WHERE id = 1").fetchone()


def _write_backup(path: Path, stamp: Stamp, document: str) -> None:
    """A new SQLite file at `path` (0600) with the store's tables and the state's row: one self-contained file (no
    WAL)."""
    private_file(path)
    engine = create_engine(URL.create("sqlite", database=str(path)), poolclass=NullPool)
    try:
        metadata.create_all(engine)
        with engine.begin() as conn:
            row = {"id": 1, "epoch": stamp.epoch, "revision": stamp.revision, "document": document}
            conn.execute(DOCUMENT.insert().values(**row))
    finally:
        engine.dispose()


def _restore_sqlite(store: DeploymentStore, path: Path, stamp: Stamp, document: str) -> str:
    """A fresh store file (the store's own schema, WAL mode, no replica reports) holding the row, put over the live
    database. Returns what was there."""
    staged = path.with_name(f".{path.name}.{os.getpid()}.restore")
    leftovers = (staged, Path(f"{staged}-wal"), Path(f"{staged}-shm"))
    for leftover in leftovers:
        leftover.unlink(missing_ok=True)
    try:
        create_sqlite_file(staged, document)
        with _open(staged, "rw") as conn:
            conn.execute(f"UPDATE {DOCUMENT.name} SET epoch = ?, revision = ? WHERE id = 1", tuple(stamp))
            conn.commit()
        return _put_in_place(store, staged, path)
    finally:
        for leftover in leftovers:
            leftover.unlink(missing_ok=True)


def _put_in_place(store: DeploymentStore, staged: Path, path: Path) -> str:
    """Copy `staged` over the live database in one transaction (readers see the old state or the new one; the live
    file's pages are replaced whole, whatever it held); a file that is no database any more (or none) is replaced by
    it. Returns what was there."""
    found = shape(store.engine, path)
    if found in ("tables", "no tables"):
        with _open(staged, "ro") as copy, _open(path, "rw") as live:
            copy.backup(live)
        return "a store without its tables" if found == "no tables" else "the store's previous state"
    for stale in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        stale.unlink(missing_ok=True)
    os.link(staged, path)
    return {"absent": "no store file", "empty file": "an empty file", "not a database": "a file that was no database"}[
        found
    ]


def _restore_tables(store: DeploymentStore, stamp: Stamp, document: str) -> str:
    """The row written into a networked store in one transaction, the replicas' reports cleared (they report again);
    the tables created first where they are gone. Returns what was there."""
    with reachable(store.url, store.backend):
        found = shape(store.engine, store.path)
        if found != "tables":
            create_tables(store.engine, document)
        add_epoch_column(store.engine)
        values = {"epoch": stamp.epoch, "revision": stamp.revision, "document": document}
        with store.engine.begin() as conn:
            if conn.execute(DOCUMENT.update().where(DOCUMENT.c.id == 1).values(**values)).rowcount != 1:
                conn.execute(DOCUMENT.insert().values(id=1, **values))
            conn.execute(REPLICAS.delete())
    return "the store's previous state" if found == "tables" else "a store without its tables"


def _epochs_known(store: DeploymentStore) -> list[int]:
    """The epochs of the store as it is (where readable and valid) and of the newest state this host saw."""
    epochs = []
    seen = store.memory.seen()
    if seen is not None:
        epochs.append(seen.epoch)
    try:
        with store.engine.connect() as conn:
            live = conn.execute(DOCUMENT.select().with_only_columns(DOCUMENT.c.epoch)).scalar()
        if type(live) is int and not epoch_ahead(live, RESTORE_ABOVE_MS):  # one further ahead: replaced
            epochs.append(live)
    except exc.DBAPIError:  # a store that lost its state has no epoch to go above
        pass
    return epochs


def _open(path: Path, mode: str) -> closing[sqlite3.Connection]:
    """A connection to `path` in `mode` (ro, rw, rwc), closed when its `with` block ends (sqlite3's own `with` only
    commits)."""
    return closing(sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode={mode}", uri=True, timeout=BUSY_TIMEOUT))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000

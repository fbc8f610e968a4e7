"""Backup and restore of an embedded SQLite state store, and the operator's word that the store's state is the one
to follow (`serving state backup|restore|accept`).

A backup is a consistent copy of the live database (SQLite's online backup API: writers may go on meanwhile), one
self-contained file. A restore checks the backup whole, gives its state a new restore epoch, above every epoch seen
(`state_rules.next_epoch`), keeps its revision, and copies it over the live database in one transaction (over a file
that is not a database any more, in its place): every process, having seen a later revision of an older epoch,
takes it. `accept` gives the state the store holds now a new epoch (after `pg_restore`, or a file put back by hand).
A PostgreSQL store is dumped and restored with PostgreSQL's own tools (`pg_dump`, `pg_restore`)."""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from pydantic import ValidationError
from sqlalchemy import exc

from services.common.errors import ConfigurationError
from services.lifecycle.deployments import Deployments
from services.lifecycle.state import DeploymentStore, Stamp
from services.lifecycle.state_db import (
    BUSY_TIMEOUT,
    DOCUMENT,
    REPLICAS,
    SQLITE_HEADER,
    add_epoch_column,
    reachable,
    shape,
)
from services.lifecycle.state_rules import next_epoch

PG_TOOLS = (
    "the deployment state store is PostgreSQL ({url}): back it up with `pg_dump --format=custom "
    "--table=serving_deployment_state --table=serving_replica_reports --file=FILE DATABASE`, restore it with "
    "`pg_restore --clean --if-exists --dbname=DATABASE FILE`, then run `serving state accept` so that every process "
    "takes the restored state (docs: The model lifecycle, Backup and restore)"
)


@dataclass(frozen=True)
class Summary:
    """A state as a command reports it."""

    stamp: Stamp
    endpoints: int

    def __str__(self) -> str:
        return f"{self.stamp} ({self.endpoints} endpoints)"


def backup(store: DeploymentStore, target: Path, *, overwrite: bool = False) -> Summary:
    """Copy the live store into `target`; refuses a store that lost its state (there is nothing to keep)."""
    path = _sqlite_file(store)
    if target.exists() and not overwrite:
        raise ConfigurationError(f"{target} exists; pass --force to replace it, or name another file")
    store.read()  # the store has its state, no older than this host saw, and valid: else this raises
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        with _open(path, "ro") as live, _open(partial, "rwc") as copy:
            live.backup(copy)
            copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file, no -wal beside it
        summary = inspect_backup(partial)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return summary


def restore(store: DeploymentStore, source: Path, *, now_ms: int | None = None) -> tuple[Summary, str]:
    """Put the state of backup `source` into the store at a new restore epoch; returns it and what it replaced."""
    path = _sqlite_file(store)
    found = inspect_backup(source)
    epoch = next_epoch(now_ms or _now_ms(), found.stamp.epoch, *_epochs_known(store))
    staged = path.with_name(f".{path.name}.{os.getpid()}.restore")
    try:
        with _open(source, "ro") as backup_file, _open(staged, "rwc") as copy:
            backup_file.backup(copy)
        _stage(staged, epoch)
        replaced = _put_in_place(store, staged, path)
    finally:
        for leftover in (staged, Path(f"{staged}-wal"), Path(f"{staged}-shm")):
            leftover.unlink(missing_ok=True)
    state = store.read()  # the restored state, now the newest this host saw
    return Summary(Stamp(epoch, found.stamp.revision), len(state.endpoints)), replaced


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
        state = _parse(row.document, f"the state in {store.url}")
        epoch = next_epoch(now_ms, row.epoch, *_epochs_known(store))
        conn.execute(DOCUMENT.update().where(DOCUMENT.c.id == 1).values(epoch=epoch))
    store.read()
    return Summary(Stamp(epoch, row.revision), len(state.endpoints))


def inspect_backup(source: Path) -> Summary:
    """The state a backup file holds, checked whole (a SQLite database, intact, with a valid state); a file that is
    not one is a ConfigurationError saying why."""
    if not source.is_file():
        raise ConfigurationError(f"{source} is not a file")
    with source.open("rb") as file:
        if file.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
            raise ConfigurationError(f"{source} is not a SQLite database (a backup made by `serving state backup`)")
    try:
        with _open(source, "ro") as conn:
            check = conn.execute("PRAGMA quick_check").fetchone()[0]
            columns = {row[1] for row in conn.execute(f"PRAGMA table_info({DOCUMENT.name})")}
            epoch = "epoch" if "epoch" in columns else "0"
            row = conn.execute(f"SELECT {epoch}, revision, document FROM {DOCUMENT.name} WHERE id = 1").fetchone()
    except sqlite3.DatabaseError as error:
        raise ConfigurationError(f"{source} is not a usable backup: {error}") from None
    if check != "ok":
        raise ConfigurationError(f"{source} is damaged (SQLite's quick_check: {check})")
    if row is None:
        raise ConfigurationError(f"{source} holds no deployment state (table {DOCUMENT.name} has no row)")
    state = _parse(row[2], str(source))
    return Summary(Stamp(int(row[0]), int(row[1])), len(state.endpoints))


def _stage(staged: Path, epoch: int) -> None:
    """The restored copy as the live store is to be: the new epoch, no replica reports (replicas report again),
    WAL mode."""
    with _open(staged, "rw") as conn:
        if "epoch" not in {row[1] for row in conn.execute(f"PRAGMA table_info({DOCUMENT.name})")}:
            conn.execute(f"ALTER TABLE {DOCUMENT.name} ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0")
        conn.execute(f"UPDATE {DOCUMENT.name} SET epoch = ? WHERE id = 1", (epoch,))
        conn.execute(f"DELETE FROM {REPLICAS.name}")
        conn.commit()
        conn.execute("PRAGMA journal_mode=WAL")


def _put_in_place(store: DeploymentStore, staged: Path, path: Path) -> str:
    """Copy `staged` over the live database in one transaction (readers see the old state or the new one); a file
    that is no database any more (or none) is replaced by it. Returns what was there."""
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


def _epochs_known(store: DeploymentStore) -> list[int]:
    """The epochs of the store as it is (where readable) and of the newest state this host saw."""
    epochs = []
    seen = store.memory.seen()
    if seen is not None:
        epochs.append(seen.epoch)
    try:
        with store.engine.connect() as conn:
            live = conn.execute(DOCUMENT.select().with_only_columns(DOCUMENT.c.epoch)).scalar()
        epochs.append(int(live or 0))
    except exc.DBAPIError:  # a store that lost its state has no epoch to go above
        pass
    return epochs


def _sqlite_file(store: DeploymentStore) -> Path:
    if store.path is None:
        raise ConfigurationError(PG_TOOLS.format(url=store.url))
    return store.path


def _parse(document: str, where: str) -> Deployments:
    try:
        return Deployments.model_validate_json(document)
    except (ValidationError, ValueError) as error:
        raise ConfigurationError(f"{where} is not a valid deployment state: {error}") from None


def _open(path: Path, mode: str) -> closing[sqlite3.Connection]:
    """A connection to `path` in `mode` (ro, rw, rwc), closed when its `with` block ends (sqlite3's own `with` only
    commits)."""
    return closing(sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode={mode}", uri=True, timeout=BUSY_TIMEOUT))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000

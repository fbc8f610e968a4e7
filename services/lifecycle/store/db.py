"""The database under the deployment state (`DeploymentStore`): its two tables, the engine for a URL, and what
a database failure means to the callers.

SQLite is the embedded default (one file under the run directory, WAL so that readers never wait for the writer, a
busy timeout so that writers queue instead of failing); PostgreSQL is the networked store of a fleet (the registry's
database server, in tables of its own). Both go through SQLAlchemy Core: the same statements run on either.

A SQLite store's file is opened, never created, by a connection: a file that went away is an error, not a new empty
store. `create_sqlite_file` makes a new one whole, beside it, and links it into place, so a store file that exists
always had its tables (`services.lifecycle.store.rules`)."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import (
    BigInteger,
    Column,
    Engine,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    exc,
    inspect,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import ConnectionPoolEntry, NullPool

from services.common.errors import ConfigurationError, Unavailable
from services.common.private import made_private, private_file
from services.common.urls import shown_url
from services.lifecycle.store.rules import Lost, Shape

BUSY_TIMEOUT = 10.0
"""Seconds a SQLite writer waits for another one before it gives up."""
CONNECT_TIMEOUT = 3
"""Seconds a PostgreSQL connection may take to open: an unreachable store is said within this, not after minutes."""
UNACKNOWLEDGED_TIMEOUT = 5
"""Seconds an open PostgreSQL connection may leave what it sent unacknowledged before the kernel drops it (libpq's
`tcp_user_timeout`): a store cut off mid-query (packets dropped, no reset) fails the query within this, instead of
after the kernel's 15 minutes of retransmissions; idle connections are probed by keepalives (5 s, then 3 x 2 s)."""
STATEMENT_TIMEOUT = 10.0
"""Seconds a PostgreSQL statement may run (its `statement_timeout`): one that waits on a lock held elsewhere (a DDL,
a `LOCK TABLE`, an operator's open transaction) or on an overloaded server fails within this, as unreachable, instead
of holding its caller and a pooled connection for as long as the lock is held. The state's statements take
milliseconds."""
IDLE_IN_TRANSACTION_TIMEOUT = 5.0
"""Seconds PostgreSQL keeps a session's transaction open while the session sends nothing (its
`idle_in_transaction_session_timeout`), then ends the session: a client cut off between its UPDATE and its COMMIT
(its close never arrives) would otherwise hold the state's row lock, and every other writer, until the server's TCP
keepalives notice, by default two hours later; shorter than `STATEMENT_TIMEOUT`, so a writer queued behind it gets
the lock rather than a timeout. The state's transactions take milliseconds."""
POOL_TIMEOUT = 15.0
"""Seconds a PostgreSQL query waits for a free connection of the process's pool before the store is said to be
unreachable."""
SQLITE_HEADER = b"SQLite format 3\x00"
"""The first bytes of every SQLite database file."""
SUPPORTED = (
    "sqlite:///<path> or postgresql+psycopg2://<role>@<host>:<port>/<database> (the password in a libpq password "
    "file), or postgresql+psycopg2://?service=<name> (all of it in a libpq service file, PGSERVICEFILE)"
)
INSUFFICIENT_PRIVILEGE = "42501"
"""PostgreSQL's code for a statement this role may not run (write a table it may only read, create a table)."""
UNPREPARED = (
    "its tables are not there yet (or lack the epoch column) and this process's database role may not make them: "
    "have the database's owner run deploy/sql/state-roles.sql (docs: Deployment, Least privilege), or give this "
    "process the role that owns the tables"
)

metadata = MetaData()
DOCUMENT = Table(
    "serving_deployment_state",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("revision", Integer, nullable=False),
    Column("document", Text, nullable=False),
    Column("epoch", BigInteger, nullable=False, server_default="0"),
)
"""One row (id 1): the whole desired state as JSON, its revision (0: never written) and its restore epoch (0: never
restored; else when an operator restored or accepted it, in milliseconds)."""
REPLICAS = Table(
    "serving_replica_reports",
    metadata,
    Column("replica", String(255), primary_key=True),
    Column("ready", Text, nullable=False),
    Column("reported_at", Float, nullable=False),
)
"""One row a Triton replica: the versions it holds ready (JSON: endpoint -> versions), and when it said so."""


class StateStoreUnavailable(Unavailable):
    """The store cannot be reached or used now (network, server down, locked too long): retry later."""

    def __init__(self, where: str, reason: str):
        super().__init__(f"the deployment state store {where} is unreachable: {reason}")
        self.reason = reason
        """The driver's words alone, for `/health/ready`."""


class StateReadOnly(StateStoreUnavailable):
    """The store refused what this process tried for lack of privilege: a role that may read the state but not
    write it (a gateway's, an agent's on a fleet), or not create its tables. Retrying does not help."""


class StateLost(StateStoreUnavailable):
    """The store answers but lost its state (no tables, an empty or foreign file) or holds an older one than this
    process saw: nothing is applied from it or written over it until an operator restores it."""

    def __init__(self, where: str, lost: Lost):
        Unavailable.__init__(self, f"the deployment state store {where} lost its state: {lost}")
        self.reason = str(lost)
        """What happened and what to do, without the store's address (for `/health/ready`)."""
        self.lost = lost


def parse_url(url: str) -> URL:
    try:
        parsed = make_url(url)
    except exc.ArgumentError:
        raise ConfigurationError(
            f"SERVING_STATE_URL '{shown_url(url)}' is not a database URL; use {SUPPORTED}"
        ) from None
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise ConfigurationError(f"SERVING_STATE_URL names a {backend} database; use {SUPPORTED}")
    if backend == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise ConfigurationError("SERVING_STATE_URL: a SQLite state store is a file (sqlite:///<path>)")
    return parsed


def shown(url: URL) -> str:
    """`url` as logs and messages show it: no password, in its userinfo or its query (`?password=`)."""
    return shown_url(url.render_as_string(hide_password=True))


def sqlite_path(url: URL) -> Path | None:
    """The file of a SQLite URL, None for another database."""
    return Path(url.database) if url.get_backend_name() == "sqlite" and url.database else None


def open_engine(url: URL) -> Engine:
    """An engine for `url`. Nothing is connected yet: a store that is down now does not fail the caller's start."""
    path = sqlite_path(url)
    if path is not None:
        made_private(path.parent)
        # No pool: each use opens the file again, so a store whose file went away is noticed, not served from an
        # open handle; opening a local file costs microseconds at these rates (a poll a second and worker). Opened
        # read-write, never created: a missing file is "unable to open database file", not a new empty store.
        uri = f"file:{quote(str(path.resolve()))}?mode=rw"
        engine = create_engine(
            url, poolclass=NullPool, creator=lambda: sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT)
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    args = {
        "connect_timeout": CONNECT_TIMEOUT,
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "tcp_user_timeout": int(UNACKNOWLEDGED_TIMEOUT * 1000),
        "options": f"-c statement_timeout={int(STATEMENT_TIMEOUT * 1000)} "
        f"-c idle_in_transaction_session_timeout={int(IDLE_IN_TRANSACTION_TIMEOUT * 1000)}",
    }
    try:
        return create_engine(
            url, pool_pre_ping=True, pool_size=2, max_overflow=4, pool_timeout=POOL_TIMEOUT, connect_args=args
        )
    except ModuleNotFoundError as missing:
        raise ConfigurationError(f"SERVING_STATE_URL needs the {missing.name} driver (psycopg2-binary)") from None


def shape(engine: Engine, path: Path | None) -> Shape:
    """What is where the store should be (`path`: a SQLite store's file), read without changing anything. The file
    itself is never opened outside SQLite: closing any descriptor of it would drop every SQLite lock this process
    holds on it (POSIX advisory locks are per process), and another thread's transaction could then be corrupted."""
    if path is not None:
        try:
            if path.stat().st_size == 0:
                return "empty file"
        except FileNotFoundError:
            return "absent"
    try:
        found = inspect(engine).has_table(DOCUMENT.name)
    except exc.DBAPIError as error:
        if lost_shape(error) == "not a database":
            return "not a database"
        raise
    if found:
        return "tables"
    return "no tables" if path is not None else "absent"


def create_sqlite_file(path: Path, empty_document: str) -> None:
    """A new SQLite store at `path` (WAL mode, both tables, the state's row at revision 0), whole or not at all: made
    beside it, then linked into place. Another process that made it first wins; this one uses theirs."""
    new = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.new")
    with suppress(FileNotFoundError):  # no directory: SQLite says so below, as for any store it cannot open
        private_file(new)  # 0600 whatever the umask; SQLite gives its WAL files the file's mode
    engine = create_engine(f"sqlite:///{new}", poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        create_tables(engine, empty_document)
        engine.dispose()
        os.link(new, path)
    except FileExistsError:
        pass
    finally:
        engine.dispose()
        for leftover in (new, new.with_name(new.name + "-wal"), new.with_name(new.name + "-shm")):
            leftover.unlink(missing_ok=True)


def add_epoch_column(engine: Engine) -> None:
    """The `epoch` column, on a store made before it existed (its states are of epoch 0)."""
    if any(column["name"] == "epoch" for column in inspect(engine).get_columns(DOCUMENT.name)):
        return
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"ALTER TABLE {DOCUMENT.name} ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0")
    except exc.DBAPIError as error:  # another process added it at the same moment
        if "duplicate column" not in str(error.orig) and "already exists" not in str(error.orig):
            raise


def create_tables(engine: Engine, empty_document: str) -> None:
    """Both tables and the state's row (revision 0), where missing. Several processes may do it at once."""
    for attempt in range(3):
        try:
            metadata.create_all(engine)
            with engine.begin() as conn:
                row = upsert(engine, DOCUMENT).values(id=1, revision=0, document=empty_document)
                conn.execute(row.on_conflict_do_nothing(index_elements=[DOCUMENT.c.id]))
            return
        except exc.DBAPIError as error:  # another process created a table at the same moment: look again
            raced = isinstance(error, exc.IntegrityError) or "already exists" in str(error.orig)
            if not raced or attempt == 2:
                raise


def upsert(engine: Engine, table: Table) -> postgresql.Insert | sqlite.Insert:
    """The dialect's INSERT, which has `on_conflict_do_update/nothing` (SQLite and PostgreSQL alike)."""
    return (postgresql if engine.dialect.name == "postgresql" else sqlite).insert(table)


def _sqlite_pragmas(connection: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
    """Per connection: nothing that writes (WAL mode is set once, in the file, by `create_sqlite_file`)."""
    cursor = connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT * 1000)}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def reason(error: exc.DBAPIError) -> str:
    """The driver's own first line (`connection to server at ... failed: Connection refused`), without SQL."""
    text = str(error.orig if error.orig is not None else error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def denied(error: exc.DBAPIError) -> bool:
    """The store refused the statement to this role (PostgreSQL's insufficient_privilege)."""
    return getattr(error.orig, "pgcode", None) == INSUFFICIENT_PRIVILEGE


def lost_shape(error: exc.DBAPIError) -> Shape | None:
    """What a database error says of a store that lost its state after a process saw it (its tables gone, its file
    emptied or replaced); None for any other failure."""
    text = reason(error)
    if "no such table" in text or getattr(error.orig, "pgcode", None) == "42P01":  # 42P01: undefined_table
        return "no tables"
    if "file is not a database" in text:
        return "not a database"
    return None


@contextmanager
def reachable(where: str, backend: str = "sqlite", preparing: bool = False) -> Iterator[None]:
    """Database failures inside as `StateStoreUnavailable` (`StateLost` where the tables are gone, `StateReadOnly`
    where this role may not do what it tried; `preparing`: it was making the store's tables, which a read-only role
    never may), naming the store (`where`, password hidden)."""
    try:
        yield
    except exc.TimeoutError as error:  # every pooled connection busy (each held by a slow statement) for too long
        raise StateStoreUnavailable(where, f"no free connection within {POOL_TIMEOUT:g}s: {error}") from error
    except exc.DBAPIError as error:
        if denied(error):
            making = preparing and error.statement is not None  # a statement, not the connection, was refused
            raise StateReadOnly(where, UNPREPARED if making else reason(error)) from error
        lost = lost_shape(error)
        if lost is not None:
            what = "its tables are gone" if lost == "no tables" else "its file is not a SQLite database"
            raise StateLost(where, Lost(f"the store was read before, now {what}", backend, can_accept=False)) from error
        raise StateStoreUnavailable(where, reason(error)) from error

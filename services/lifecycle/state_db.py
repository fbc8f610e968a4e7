"""The database under the deployment state (`state.DeploymentStore`): its two tables, the engine for a URL, and what
a database failure means to the callers.

SQLite is the embedded default (one file under the run directory, WAL so that readers never wait for the writer, a
busy timeout so that writers queue instead of failing); PostgreSQL is the networked store of a fleet (the registry's
database server, in tables of its own). Both go through SQLAlchemy Core: the same statements run on either."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Column, Engine, Float, Integer, MetaData, String, Table, Text, create_engine, event, exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import NullPool

from services.common.errors import ConfigurationError, Unavailable

BUSY_TIMEOUT = 10.0
"""Seconds a SQLite writer waits for another one before it gives up."""
CONNECT_TIMEOUT = 3
"""Seconds a PostgreSQL connection may take to open: an unreachable store is said within this, not after minutes."""
SUPPORTED = "sqlite:///<path> or postgresql+psycopg2://<user>[:<password>]@<host>:<port>/<database>"

metadata = MetaData()
DOCUMENT = Table(
    "serving_deployment_state",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("revision", Integer, nullable=False),
    Column("document", Text, nullable=False),
)
"""One row (id 1): the whole desired state as JSON, and its revision (0: never written)."""
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


def parse_url(url: str) -> URL:
    try:
        parsed = make_url(url)
    except exc.ArgumentError:
        raise ConfigurationError(f"SERVING_STATE_URL '{url}' is not a database URL; use {SUPPORTED}") from None
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise ConfigurationError(f"SERVING_STATE_URL names a {backend} database; use {SUPPORTED}")
    if backend == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise ConfigurationError("SERVING_STATE_URL: a SQLite state store is a file (sqlite:///<path>)")
    return parsed


def sqlite_path(url: URL) -> Path | None:
    """The file of a SQLite URL, None for another database."""
    return Path(url.database) if url.get_backend_name() == "sqlite" else None


def open_engine(url: URL) -> Engine:
    """An engine for `url`. Nothing is connected yet: a store that is down now does not fail the caller's start."""
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # No pool: each use opens the file again, so a store whose file went away is noticed, not served from an
        # open handle; opening a local file costs microseconds at these rates (a poll a second and worker).
        engine = create_engine(url, poolclass=NullPool, connect_args={"timeout": BUSY_TIMEOUT})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    args = {"connect_timeout": CONNECT_TIMEOUT, "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2}
    try:
        return create_engine(url, pool_pre_ping=True, pool_size=2, max_overflow=4, connect_args=args)
    except ModuleNotFoundError as missing:
        raise ConfigurationError(f"SERVING_STATE_URL needs the {missing.name} driver (psycopg2-binary)") from None


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


def upsert(engine: Engine, table: Table):
    """The dialect's INSERT, which has `on_conflict_do_update/nothing` (SQLite and PostgreSQL alike)."""
    return (postgresql if engine.dialect.name == "postgresql" else sqlite).insert(table)


def _sqlite_pragmas(connection, _record) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT * 1000)}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def reason(error: exc.DBAPIError) -> str:
    """The driver's own first line (`connection to server at ... failed: Connection refused`), without SQL."""
    text = str(error.orig if error.orig is not None else error).strip()
    return text.splitlines()[0] if text else type(error).__name__


@contextmanager
def reachable(where: str) -> Iterator[None]:
    """Database failures inside as `StateStoreUnavailable`, naming the store (`where`, password hidden)."""
    try:
        yield
    except exc.DBAPIError as error:
        raise StateStoreUnavailable(where, reason(error)) from error

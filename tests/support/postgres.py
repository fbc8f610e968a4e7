"""A real PostgreSQL server for the tests, as production's shared stores run on one: the machine's own `initdb` and
`postgres` (PostgreSQL 15 from the distribution, /usr/lib/postgresql/<n>/bin, or POSTGRES_BIN), a throwaway data
directory, listening on its own loopback address (127.0.0.5) and a free port, its socket in that directory.
PostgreSQL refuses to run as root: as root, the server runs as the `postgres` user (the directory is handed to it).
Its superuser `serving` connects without a password; every other role needs its password (SCRAM), as in production,
so that a test of a role's credentials tests them.

One server for the session (`postgres` fixture, see tests/conftest.py), stopped at its end; `stop()` and `start()`
let a test take the store away and bring it back (same data, same address)."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.launcher import free_port

HOST = "127.0.0.5"
USER = "serving"
HBA = f"""local all all trust
host all {USER} 127.0.0.0/8 trust
host all all 127.0.0.0/8 scram-sha-256
"""
"""Who connects how: the superuser without a password, every other role with its own (connections to 127.0.0.5 come
from a loopback address)."""


def postgres_bin() -> Path:
    """The directory of `initdb` and `postgres`: POSTGRES_BIN, else the newest /usr/lib/postgresql/<n>/bin."""
    given = os.environ.get("POSTGRES_BIN")
    found = (
        [Path(given)] if given else sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    )
    for candidate in reversed(found):
        if (candidate / "postgres").is_file() and (candidate / "initdb").is_file():
            return candidate
    raise RuntimeError("no PostgreSQL server binaries: apt-get install postgresql, or set POSTGRES_BIN to their folder")


class Postgres:
    """One server: `initdb` once, then `start()` / `stop()` as often as a test wants."""

    def __init__(self, root: Path):
        self.bin = postgres_bin()
        self.root = root
        self.data = root / "data"
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        self.owner = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        if self.owner is not None:
            os.chown(root, self.owner.pw_uid, self.owner.pw_gid)
        self._run([self.bin / "initdb", "-D", self.data, "-U", USER, "--auth=trust", "-E", "UTF8", "--no-sync"])
        (self.data / "pg_hba.conf").write_text(HBA)

    def url(self, database: str = "serving") -> str:
        return f"postgresql+psycopg2://{USER}@{HOST}:{self.port}/{database}"

    def start(self, timeout: float = 30.0) -> None:
        """Start the server and wait until it accepts connections."""
        args = [self.bin / "postgres", "-D", self.data, "-k", self.root, "-h", HOST, "-p", str(self.port)]
        args += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        with open(self.root / "server.log", "ab") as log:
            self.process = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **self._as_owner()
            )
        deadline = time.monotonic() + timeout
        while not self._accepts():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not start: {self.log()[-2000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Fast shutdown (SIGINT: sessions ended, transactions rolled back), as when the store's host goes down."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def create_database(self, name: str) -> str:
        """A new database on the server; its URL."""
        import psycopg2

        connection = psycopg2.connect(host=HOST, port=self.port, user=USER, dbname="postgres")
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        connection.close()
        return self.url(name)

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _accepts(self) -> bool:
        import psycopg2

        try:
            psycopg2.connect(host=HOST, port=self.port, user=USER, dbname="postgres", connect_timeout=2).close()
        except psycopg2.OperationalError:
            return False
        return True

    def _as_owner(self) -> dict:
        if self.owner is None:
            return {}
        return {"user": self.owner.pw_uid, "group": self.owner.pw_gid, "extra_groups": []}

    def _run(self, args: list) -> None:
        done = subprocess.run(args, capture_output=True, text=True, timeout=120, **self._as_owner())
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stdout[-1000:]} {done.stderr[-2000:]}")


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """A running PostgreSQL server, shared by the session (each test module makes its own database)."""
    root = Path(tempfile.mkdtemp(prefix="serving-postgres-"))  # not under pytest's root-only folder: postgres reads it
    server = Postgres(root)
    server.start()
    yield server
    server.stop()
    shutil.rmtree(root, ignore_errors=True)

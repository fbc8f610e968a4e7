"""When a deployment state store has lost its state: pure rules over what a process finds and what it saw before.

A store that lost its state is not an empty state. Every process remembers the newest state it read (its `Stamp`:
the restore epoch, then the revision) and never applies, nor writes over, an older one: a gateway would drop every
endpoint, the controller would start deploying from nothing. Only an operator puts an older state back
(`serving state restore FILE`, or `serving state accept` after a restore by other means); either gives the state a
new epoch, above every one before, so that every process takes it.

Whether a store may be created (the tables and the state's row, at revision 0):
- SQLite: only where its file does not exist and this host never saw a state of it (the first start of a run
  directory). A file that exists is never "new": empty (0 bytes), not a SQLite database, or without the tables, it
  lost its state.
- PostgreSQL: only where the tables are missing and this process never saw a state of them (the first start of a
  fleet); tables missing after a process saw them are a lost state.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

Shape = Literal["absent", "empty file", "not a database", "no tables", "tables"]
"""What a process finds where the store should be: `absent` (SQLite: no file; PostgreSQL: no tables), a file of
0 bytes, a file that is no SQLite database, a SQLite database without the tables, or the tables."""


class Stamp(NamedTuple):
    """Where a state stands: states compare by restore epoch first (0 until the first restore), then by revision."""

    epoch: int
    revision: int

    def __str__(self) -> str:
        return f"revision {self.revision}" + (f" of restore epoch {self.epoch}" if self.epoch else "")


def may_create(shape: Shape, seen: Stamp | None, backend: str) -> bool:
    """True where the store is to be created now (its first start); False where it is there to be used. Raises
    `Lost` where it lost its state."""
    if shape == "tables":
        return False
    if shape == "absent" and seen is None:
        return True
    if shape == "absent":
        gone = "file is gone" if backend == "sqlite" else "tables are gone"
        raise Lost(f"the store's {gone}, and this host last saw {seen} of it", backend, can_accept=False)
    what = {
        "empty file": "the store's file is empty (0 bytes)",
        "not a database": "the store's file is not a SQLite database",
        "no tables": "the store's file has none of its tables",
    }[shape]
    raise Lost(what, backend, can_accept=False)


def check_not_older(stored: Stamp, seen: Stamp | None, backend: str) -> None:
    """Raises `Lost` when the store holds an older state than one this process saw."""
    if seen is not None and stored < seen:
        raise Lost(f"the store holds {stored}, older than {seen} this host saw", backend, can_accept=True)


def next_epoch(now_ms: int, *epochs: int) -> int:
    """The epoch of a restored or accepted state: the time in milliseconds, and above every epoch known (a clock set
    back still gives a newer epoch)."""
    return max([now_ms, *(epoch + 1 for epoch in epochs)])


class Lost(Exception):
    """The store lost its state, or holds an older one than seen: `what` happened, and `advice` on what to do."""

    def __init__(self, what: str, backend: str, *, can_accept: bool):
        super().__init__(what)
        self.what = what
        self.advice = advice(backend, can_accept=can_accept)

    def __str__(self) -> str:
        return f"{self.what}; {self.advice}"


def advice(backend: str, *, can_accept: bool) -> str:
    """What an operator does about a lost state, for the store's kind."""
    restore = "restore a backup with `serving state restore FILE`"
    if can_accept:
        return f"{restore}, or take the store as it is with `serving state accept`"
    if backend != "sqlite":
        return f"{restore} (or a dump with pg_restore, then run `serving state accept`)"
    return restore

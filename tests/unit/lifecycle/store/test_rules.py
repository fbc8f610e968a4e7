"""The rules of a store that lost its state, as pure functions: when a store may be created, when a state is older
than one seen, and the epoch a restore gives."""

from __future__ import annotations

import pytest

from services.lifecycle.store.rules import Lost, Stamp, check_not_older, may_create, next_epoch


def test_only_an_absent_store_never_seen_is_created():
    assert may_create("absent", None, "sqlite") is True, "the first start of a run directory"
    assert may_create("absent", None, "postgresql") is True, "the first start of a fleet"
    assert may_create("tables", None, "sqlite") is False and may_create("tables", Stamp(0, 7), "sqlite") is False


@pytest.mark.parametrize(
    ("shape", "seen", "says"),
    [
        ("absent", Stamp(0, 12), "the store's file is gone, and this host last saw revision 12 of it"),
        ("empty file", None, "the store's file is empty (0 bytes)"),
        ("empty file", Stamp(0, 3), "the store's file is empty (0 bytes)"),
        ("not a database", None, "the store's file is not a SQLite database"),
        ("no tables", None, "the store's file has none of its tables"),
    ],
)
def test_a_sqlite_store_that_had_a_state_is_never_created_again(shape, seen, says):
    """A file that exists is never new, whatever this host remembers; a missing one is new only to a host that
    never saw it."""
    with pytest.raises(Lost) as raised:
        may_create(shape, seen, "sqlite")
    assert str(raised.value) == f"{says}; restore a backup with `serving state restore FILE`"


def test_postgresql_tables_missing_after_they_were_seen_are_a_lost_state():
    with pytest.raises(Lost) as raised:
        may_create("absent", Stamp(0, 4), "postgresql")
    assert raised.value.what == "the store's tables are gone, and this host last saw revision 4 of it"
    assert raised.value.advice == (
        "restore a backup with `serving state restore FILE` "
        "(or a dump with pg_restore, then run `serving state accept`)"
    )


@pytest.mark.parametrize(
    ("stored", "seen", "older"),
    [
        (Stamp(0, 11), Stamp(0, 12), True),
        (Stamp(0, 0), Stamp(0, 12), True),
        (Stamp(0, 12), Stamp(0, 12), False),
        (Stamp(0, 13), Stamp(0, 12), False),
        (Stamp(5, 9), Stamp(0, 12), False),  # restored: a newer epoch wins over a higher revision
        (Stamp(5, 9), Stamp(6, 1), True),  # a backup put back by hand over a later restore
        (Stamp(0, 0), None, False),  # nothing seen yet: any state goes
    ],
)
def test_a_state_older_than_the_one_seen_is_refused(stored, seen, older):
    if not older:
        check_not_older(stored, seen, "sqlite")
        return
    with pytest.raises(Lost) as raised:
        check_not_older(stored, seen, "sqlite")
    assert raised.value.what == f"the store holds {stored}, older than {seen} this host saw"
    assert "`serving state accept`" in raised.value.advice, "the state is there: it may be taken as it is"


def test_a_restore_epoch_is_the_time_and_above_every_epoch_known():
    assert next_epoch(1_000) == 1_000
    assert next_epoch(1_000, 0, 999) == 1_000
    assert next_epoch(1_000, 1_000, 5) == 1_001, "a clock that did not move still gives a newer epoch"
    assert next_epoch(1_000, 2_000) == 2_001, "a clock set back too"


def test_stamps_read_as_an_operator_reads_them():
    assert str(Stamp(0, 12)) == "revision 12"
    assert str(Stamp(1_700_000_000_000, 9)) == "revision 9 of restore epoch 1700000000000"

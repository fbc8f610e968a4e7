"""What a fresh-eyes attack on the validated state still got through: the stack's own Triton models removed by
name, terminal escapes in reasons, a document of any size, and stamps that are no counts."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from services.common.confined import OutsideBase
from services.lifecycle.deployments import (
    LARGEST_COUNT,
    LARGEST_DOCUMENT,
    EndpointState,
    StateInvalid,
    checked_counts,
    parse,
)
from services.lifecycle.store import DeploymentStore
from services.lifecycle.store.backup import backup, restore
from services.triton.model_control import TritonModels


@pytest.mark.parametrize("name", ["encoder", "tokenizer", "ensemble"])
def test_the_stacks_own_triton_models_are_never_removed_by_name_from_the_state(tmp_path, name):
    (tmp_path / name / "1").mkdir(parents=True)
    models = TritonModels(tmp_path, "http://127.0.0.1:9", control_key=None)
    for act in (lambda: models.remove(name, "1"), lambda: models.forget(name), lambda: models.load(name)):
        with pytest.raises(OutsideBase, match="the stack's own Triton models"):
            act()
    assert (tmp_path / name / "1").is_dir()


def test_control_characters_in_a_reason_reach_nobody_as_escape_sequences():
    reason = "\x1b[2J\x1b]0;owned\x07\r\nfake line\u202e" + "x" * 9_900
    document = {"endpoints": {"e": {"versions": {"1": {"version": "1", "state": "rejected", "reason": reason}}}}}
    shown = parse(json.dumps(document)).endpoints["e"].versions["1"].reason
    assert shown.isprintable() and "\\x1b[2J" in shown and "\\r\\n" in shown
    assert len(shown) <= 10_000, "still valid when the state is read again"
    again = {"endpoints": {"e": {"versions": {"1": {"version": "1", "state": "rejected", "reason": shown}}}}}
    assert parse(json.dumps(again)).endpoints["e"].versions["1"].reason == shown


def test_a_document_over_the_bound_is_refused_before_it_is_parsed():
    document = json.dumps({"endpoints": {}, "pad": "x" * LARGEST_DOCUMENT})
    with pytest.raises(StateInvalid, match="over"):
        parse(document)


@pytest.mark.parametrize(
    "epoch, revision", [("abc", 1), (1, "x"), (1.5, 2), (LARGEST_COUNT + 1, 0), (0, 2**63 - 1), (-1, 0), (True, 1)]
)
def test_a_stamp_that_is_no_count_is_refused(epoch, revision):
    with pytest.raises(StateInvalid, match="is not a count"):
        checked_counts(epoch, revision)


def test_a_store_whose_revision_was_made_text_is_invalid_not_a_crash(tmp_path):
    path = tmp_path / "state.db"
    store = DeploymentStore.open(f"sqlite:///{path}")
    store.update(lambda s: None)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE serving_deployment_state SET revision = 'abc'")
    with pytest.raises(StateInvalid, match="revision"):
        store.stamp()
    with pytest.raises(StateInvalid, match="revision"):
        store.read()
    store.close()


def test_an_epoch_far_ahead_of_the_clock_is_invalid_and_a_restore_recovers_from_it(tmp_path):
    """Before: an epoch set to 2^53 was valid; the next restore wrote 2^53 + 1, which every process refused, and the
    host's memory kept every later restore behind it. Now such an epoch is refused on read and never remembered."""
    path = tmp_path / "state.db"
    store = DeploymentStore.open(f"sqlite:///{path}")
    store.update(lambda s: s.endpoints.setdefault("emb", EndpointState()))
    backup(store, tmp_path / "b.db")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE serving_deployment_state SET epoch = ?", (LARGEST_COUNT,))
    with pytest.raises(StateInvalid, match="more than 24 h ahead"):
        store.read()
    memory = path.with_name(path.name + ".last-good.json")
    memory.write_text(json.dumps({"epoch": LARGEST_COUNT, "revision": 9, "state": "{}"}))  # remembered before the fix
    summary, _ = restore(DeploymentStore.open(f"sqlite:///{path}"), tmp_path / "b.db")
    assert summary.stamp.epoch <= time.time() * 1000 + 1000, "the restore's epoch is a time, not above the bad one"
    again = DeploymentStore.open(f"sqlite:///{path}")
    assert list(again.read().endpoints) == ["emb"]
    store.close()
    again.close()


def test_a_restore_goes_above_an_epoch_that_a_host_with_a_later_clock_took(tmp_path):
    """Before: an epoch a day ahead by one host's clock was valid there and skipped by a restore on a host whose clock
    was behind, whose lower epoch the first host then refused as older for a day."""
    path = tmp_path / "state.db"
    store = DeploymentStore.open(f"sqlite:///{path}")
    store.update(lambda s: s.endpoints.setdefault("emb", EndpointState()))
    backup(store, tmp_path / "b.db")
    now = int(time.time() * 1000)
    for ahead, restored in ((24 * 3600 * 1000 + 60_000, "above it"), (48 * 3600 * 1000, "at this host's time")):
        taken = now + ahead  # a day and a minute: refused here, taken by a host whose clock is two minutes ahead
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE serving_deployment_state SET epoch = ?", (taken,))
        with pytest.raises(StateInvalid, match="more than 24 h ahead"):
            store.read()
        summary, _ = restore(DeploymentStore.open(f"sqlite:///{path}"), tmp_path / "b.db")
        if restored == "above it":
            assert summary.stamp.epoch == taken + 1, "within minutes of skew: every host's readers take it soon"
        else:
            assert summary.stamp.epoch < now + 3_600_000, "two days ahead is no skew: the restore replaces it"
    store.close()


def test_a_change_at_the_last_revision_is_refused_not_written_out_of_bounds(tmp_path):
    path = tmp_path / "state.db"
    store = DeploymentStore.open(f"sqlite:///{path}")
    store.update(lambda s: None)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE serving_deployment_state SET revision = ?", (LARGEST_COUNT,))
    with pytest.raises(StateInvalid, match="no revision left"):
        store.update(lambda s: s.endpoints.setdefault("emb", EndpointState()))
    assert store.stamp().revision == LARGEST_COUNT
    store.close()

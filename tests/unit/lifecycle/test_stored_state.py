"""A state document as stores hold it today reads and writes back the same, byte for byte: the lifecycle's types
(phases, rollout statuses) are the document's own words, so no store needs a migration.

`data/stored_state.json` was written by `deployments.dump` before the phases became enums; it holds every phase
(a verified and an unverified `loading` version, a rejected version still draining and one drained), every rollout
status, both canary splits, a rollout policy and a removed version."""

from __future__ import annotations

import json
from pathlib import Path

from services.lifecycle.deployments import Phase, RolloutStatus, dump, parse
from services.lifecycle.routing import Precedence, governing
from services.lifecycle.store import DeploymentStore

STORED = Path(__file__).parent / "data" / "stored_state.json"


def test_a_stored_document_writes_back_byte_for_byte():
    text = STORED.read_text()
    assert dump(parse(text)) == text


def test_a_stored_document_reads_as_the_same_values():
    state = parse(STORED.read_text())
    emb = state.endpoints["emb"]
    assert {v: r.state for v, r in emb.versions.items()} == {
        "1": "live",
        "2": "live",
        "3": "loading",
        "4": "loading",
        "5": "draining",
        "6": "rejected",
        "7": "rejected",
    }
    assert (emb.rollout.status, state.endpoints["pinned"].rollout.status, state.endpoints["newest"].rollout.status) == (
        "running",
        "rolled_back",
        "promoted",
    )
    assert json.loads(dump(state)) == json.loads(STORED.read_text())
    assert all(isinstance(r.state, Phase) for e in state.endpoints.values() for r in e.versions.values())
    assert all(isinstance(e.rollout.status, RolloutStatus) for e in state.endpoints.values())


def test_the_phases_read_from_the_fields_beside_the_phase():
    versions = parse(STORED.read_text()).endpoints["emb"].versions
    assert [v for v, r in versions.items() if r.verified()] == ["3"]
    assert [v for v, r in versions.items() if r.draining_out()] == ["5", "6"]


def test_each_stored_endpoint_is_governed_by_the_rule_its_fields_set():
    state = parse(STORED.read_text())
    assert {n: governing(e, e.live()) for n, e in state.endpoints.items()} == {
        "emb": Precedence.ROLLOUT,
        "pinned": Precedence.BY_VERSION,
        "newest": Precedence.NEWEST_SPLIT,
    }


def test_a_store_keeps_a_stored_document_through_a_change_that_changes_nothing(tmp_path):
    store = DeploymentStore.open(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        text = STORED.read_text()
        store.update(lambda s: s.endpoints.update(parse(text).endpoints))
        revision = store.revision()
        store.update(lambda s: None)
        stamp, document = store._fetch()
        assert (stamp.revision, document) == (revision, text)
    finally:
        store.close()

"""A crafted deployment state never makes a replica's agent touch a path outside its models directory and its
repository: an endpoint named `../../...<dir>` made the agent fetch into, place under and drop `<dir>/<version>` on
every Triton host. Now the state is refused on read (nothing fetched, placed or removed), and `place` and `drop`
refuse an outside path even when given one."""

from __future__ import annotations

import json

import pytest

from services.common.confined import OutsideBase
from services.common.contract import checked_hashes
from services.lifecycle.deployments import StateInvalid
from tests.support.state import escaping, victim_dir, write_document
from tests.unit.replica.agent_world import Replica


@pytest.fixture
def replica(tmp_path) -> Replica:
    """An agent whose repository and models directory exist, as once it placed a version."""
    replica = Replica(tmp_path)
    replica.models_dir.mkdir()
    replica.triton.repository.mkdir()
    return replica


@pytest.fixture
def victim(tmp_path):
    return victim_dir(tmp_path)


def untouched(victim) -> bool:
    return sorted(p.name for p in victim.iterdir()) == ["important"] and (victim / "important" / "keep").is_file()


def test_a_state_whose_live_version_would_be_fetched_and_placed_outside_is_refused(replica, victim):
    """Version 1 of the attacker's registered model, live under an endpoint that leads to `victim`, with its real
    hashes: the agent fetched it into `victim/1` and linked Triton's files there."""
    version = replica.registry.add("m", replica.model_dir)
    document = json.loads(escaping(victim, version=version, phase="live"))
    endpoint = next(iter(document["endpoints"].values()))
    endpoint["registered_name"] = "m"
    lineage = {"registry": {"name": "m", "version": version}, "artifacts": checked_hashes(replica.model_dir)}
    endpoint["versions"][version]["lineage"] = lineage
    write_document(replica.store, json.dumps(document))
    for look in (replica.tick, replica.agent.prepare):
        with pytest.raises(StateInvalid, match=r"\[key\]: endpoint name"):
            look()
    assert untouched(victim) and replica.fetches == 0


def test_drop_and_place_refuse_a_path_outside_even_when_given_one(replica, victim):
    name = next(iter(json.loads(escaping(victim))["endpoints"]))
    with pytest.raises(OutsideBase):
        replica.agent.drop(name, ["important"])
    with pytest.raises(OutsideBase):
        replica.agent.place(name, "m", "important", None)
    with pytest.raises(OutsideBase):
        replica.agent.drop("emb", ["../../victim/important"])
    assert untouched(victim) and replica.fetches == 0

"""The deployment state is validated wherever it is read, by the rules of every other door: endpoint names, registered
names, version keys (each record's `version` equal to its key), numbers within their bounds. A state that breaks one
is refused whole (`StateInvalid`, naming the field), never remembered as the last good one, never written over; a
change that would make one writes nothing; a 60,000-character name never reaches a message whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.common.errors import InvalidInput
from services.lifecycle.deployments import (
    LONGEST_WAIT,
    MOST_VERSIONS,
    Deployments,
    EndpointState,
    StateInvalid,
    VersionState,
    parse,
)
from services.lifecycle.store import DeploymentStore
from tests.support.state import escaping, stored, write_document


@pytest.fixture
def store(tmp_path) -> DeploymentStore:
    store = DeploymentStore.open(f"sqlite:///{tmp_path / 'lifecycle' / 'state.db'}")
    live = VersionState(version="1", state="live", model_dir="/srv/models/emb/1/model")
    store.update(
        lambda s: s.endpoints.setdefault("emb", EndpointState(registered_name="tiny-emb", versions={"1": live}))
    )
    yield store
    store.close()


def endpoint(**fields) -> str:
    """A document with endpoint `emb` holding `fields`."""
    return json.dumps({"endpoints": {"emb": fields}})


def version(key: str = "1", **fields) -> str:
    """A document with version `key` of endpoint `emb` holding `fields`."""
    return endpoint(versions={key: {"version": key, **fields}})


BROKEN = {
    "endpoint name out of the base directory": (escaping(Path("/srv")), "endpoint name"),
    "endpoint name with a separator": (json.dumps({"endpoints": {"a/b": {}}}), "endpoints.a/b.[key]: endpoint name"),
    "upper-case endpoint name": (json.dumps({"endpoints": {"Emb": {}}}), "endpoint name 'Emb' is not valid"),
    "version key that is no number": (
        endpoint(versions={"important": {"version": "important"}}),
        "versions.important.[key]: version 'important' is not a registry version number",
    ),
    "version with a leading zero": (endpoint(versions={"01": {"version": "01"}}), "version '01' is not a registry"),
    "record under another version's key": (
        endpoint(versions={"1": {"version": "2"}}),
        "versions.1 holds version '2'",
    ),
    "registered name with a quote and a newline": (
        endpoint(registered_name='m" or name != "x\n'),
        "endpoints.emb.registered_name: registered model name",
    ),
    "registered name of 60,000 characters": (
        endpoint(registered_name="m" * 60_000),
        "registered model name 'mmmm",
    ),
    "registered name with a separator": (endpoint(registered_name="../other"), "registered model name '../other'"),
    "max_versions of 1e30": (endpoint(max_versions=10**30), "endpoints.emb.max_versions"),
    "max_versions over the bound": (endpoint(max_versions=MOST_VERSIONS + 1), f"less than or equal to {MOST_VERSIONS}"),
    "dwell of 1e308": (endpoint(rollout_policy={"dwell": 1e308}), "rollout_policy.dwell: Input should be less than"),
    "max_wait over a week": (endpoint(rollout_policy={"max_wait": LONGEST_WAIT + 1}), "rollout_policy.max_wait"),
    "drain started at 1e308": (
        endpoint(versions={"1": {"version": "1", "state": "draining", "drain_started": 1e308}}),
        "versions.1.drain_started: Input should be less than or equal to",
    ),
    "rollout step started at 1e308": (
        endpoint(rollout={"version": "2", "stable": "1", "steps": [50, 100], "step_started": 1e308}),
        "rollout.step_started: Input should be less than or equal to",
    ),
    "min_requests of 1e12": (endpoint(rollout_policy={"min_requests": 10**12}), "rollout_policy.min_requests"),
    "NaN": ('{"endpoints": {"emb": {"rollout_policy": {"max_error_rate": NaN}}}}', "finite number"),
    "Infinity": ('{"endpoints": {"emb": {"weights": {"1": Infinity}}}}', "weights.1: Input should be a finite"),
    "negative weight": (endpoint(weights={"1": -1}), "weights.1: Input should be greater than or equal to 0"),
    "weight under a name that is no version": (endpoint(weights={"../1": 1}), "weights.../1.[key]: version"),
    "rollout step past its steps": (
        endpoint(rollout={"version": "2", "stable": "1", "steps": [50, 100], "step": 2}),
        "step 2 is not one of the 2 steps",
    ),
    "rollout of a version that is no number": (
        endpoint(rollout={"version": "../x", "stable": "1"}),
        "rollout.version: version '../x'",
    ),
    "removed version that is no number": (endpoint(removed=["1", ".."]), "removed.1: version '..'"),
    "lineage naming a registered model out of MLflow's rule": (
        version(lineage={"registry": {"name": "a/b", "version": "1"}}),
        "lineage: registered model name 'a/b'",
    ),
    "model_dir with a control character": (version(model_dir="/srv/\x1b[2J"), "model_dir '/srv/\\x1b[2J'"),
    "drain started before the epoch": (version(state="draining", drain_started=-1), "drain_started"),
}


@pytest.mark.parametrize("document, says", list(BROKEN.values()), ids=list(BROKEN))
def test_a_state_that_breaks_a_rule_is_refused_whole_naming_the_field(store, document, says):
    good = store.read()
    write_document(store, document)
    for read in (store.read, store.current, lambda: store.endpoint("emb")):
        with pytest.raises(StateInvalid) as raised:
            read()
        assert raised.value.message.startswith("the deployment state (revision 2) is invalid: endpoints")
        assert says in raised.value.message, raised.value.message
        assert len(raised.value.message) < 2000, "a long name is cut, not repeated whole"
    with pytest.raises(StateInvalid):
        store.update(lambda s: s.endpoints.setdefault("other", EndpointState()))
    assert stored(store)[1] == document, "nothing written over it"
    assert store.remembered() == ((0, 1), good), "the last good state stays the one remembered"


def test_the_states_the_project_writes_are_valid():
    """What the controller and the admin API write (a live version with its lineage, a canary, a rollout under a
    policy, removed versions) reads back as it was."""
    document = endpoint(
        registered_name="all-MiniLM-L6-v2 (prod)",
        max_versions=3,
        versions={
            "7": {
                "version": "7",
                "state": "live",
                "model_dir": "run/lifecycle/models/emb/7/model",
                "deployed_at": "2026-12-01T10:00:00Z",
                "lineage": {
                    "registry": {"name": "all-MiniLM-L6-v2 (prod)", "version": "7", "url": "http://x/7"},
                    "artifacts": {"manifest.json": "ab" * 32},
                    "run": {"id": "r"},
                },
            },
            "8": {"version": "8", "state": "rejected", "reason": "does not match its manifest hash\ntraceback"},
        },
        weights={"7": 90, "8": 10},
        rollout={"version": "8", "stable": "7", "step": 1, "step_started": 1.5e9, "baseline": {"versions": {}}},
        rollout_policy={"steps": [5, 100], "dwell": 3600, "max_wait": 86400, "min_requests": 1000},
        removed=["6"],
    )
    state = parse(document)
    assert state.endpoints["emb"].rollout.step == 1 and state == Deployments.model_validate_json(document)


def test_a_change_that_would_make_the_state_invalid_writes_nothing(store):
    def bad(state):
        state.endpoints["../../etc"] = EndpointState()

    with pytest.raises(InvalidInput, match=r"nothing written: .*endpoints\.\.\./\.\./etc\.\[key\]: endpoint name"):
        store.update(bad)
    with pytest.raises(InvalidInput, match="max_versions"):
        store.update(lambda s: setattr(s.endpoints["emb"], "max_versions", 10**6))
    assert store.revision() == 1 and sorted(store.read().endpoints) == ["emb"]


def test_a_worker_starting_against_an_invalid_state_has_its_hosts_last_good_one(store):
    write_document(store, escaping(Path("/srv")))
    restarted = DeploymentStore.open(store.url)
    with pytest.raises(StateInvalid):
        restarted.read()
    stamp, state = restarted.remembered()
    assert stamp == (0, 1) and sorted(state.endpoints) == ["emb"]

"""The replica agent's decisions (`services.replica.agent`), tick by tick: what it places before its Triton starts,
what it loads, removes and reports while it runs, and what it does when a version fails here; over a real state store
and the real repository handling, with Triton's HTTP API played in memory (`agent_world.py`).
`tests/integration/lifecycle/test_agent.py` runs the same agent against real Tritons and a real MLflow server."""

from __future__ import annotations

import json
import logging
import shutil
import socket

import numpy as np
import pytest

from services.common.contract import MANIFEST_FILE, MODEL_FILE, sha256_file
from services.replica.plan import Change, plan
from services.replica.settings import AgentSettings
from tests.support.models import UNIT_HIDDEN, unit_model_dir
from tests.unit.replica.agent_world import REPLICA, Replica


@pytest.fixture
def replica(tmp_path) -> Replica:
    return Replica(tmp_path)


def test_plan_adds_the_missing_versions_drops_the_unwanted_and_leaves_the_rest_alone():
    changes = plan({"a": ["9", "10"], "b": ["1"], "c": ["2"]}, {"a": ["9", "8"], "b": ["1"], "d": ["3"]})
    assert changes == {"a": Change(add=["10"], drop=["8"]), "c": Change(add=["2"]), "d": Change(drop=["3"])}
    assert plan({"a": ["1"]}, {"a": ["1"]}) == {}


def test_plan_adds_again_a_placed_version_triton_does_not_serve():
    assert plan({"a": ["1", "2"]}, {"a": ["1", "2"]}, {"a": ["2"]}) == {"a": Change(add=["1"])}
    assert plan({"a": ["1"]}, {"a": ["1", "2"]}, {"a": ["1", "2"]}) == {"a": Change(drop=["2"])}


def test_before_triton_starts_every_live_version_is_placed_and_nothing_else(replica, tmp_path):
    live = [replica.version("live"), replica.version("live")]
    replica.version("draining", drain_started=1.0)
    replica.version("loading", verified=True)
    stale = unit_model_dir(tmp_path / "stale")
    replica.triton.place("gone", "7", stale)  # an endpoint deleted while this replica was down
    replica.triton.place("emb", "9", stale)
    assert replica.agent.prepare() == ["emb"]
    assert replica.placed() == live and "gone" not in replica.triton.placed_versions()
    assert not (replica.triton.repository / "gone").exists()
    assert (replica.triton.repository / "emb" / "1" / MODEL_FILE).resolve().parent == replica.models_dir / "emb/1/model"
    assert replica.triton.loads == 0 and replica.fetches == 2
    replica.agent.prepare()  # a restart: the fetched copies are intact, nothing is fetched again
    assert replica.fetches == 2


def test_no_start_without_every_live_version(replica):
    replica.version("live")
    replica.registry.reachable = False
    with pytest.raises(ConnectionError):
        replica.agent.prepare()
    assert replica.placed() == []


def test_a_starting_replica_holds_versions_back_and_one_whose_triton_is_down_ages_out(replica):
    replica.version("live")
    replica.agent.prepare()
    assert replica.reported() == {}  # it reported itself holding nothing: a new version waits for it
    replica.triton.up = False
    assert replica.tick(seconds=5.0) == {} and replica.tick(seconds=6.0) is None


def test_live_versions_loaded_at_the_start_are_warmed_up_and_reported(replica):
    version = replica.version("live")
    replica.agent.prepare()
    replica.triton.load("emb")  # what tritonserver does with --load-model=emb
    assert replica.tick() == {"emb": [version]}
    assert replica.triton.infers == 3  # warm-up and check, once
    replica.tick()
    assert replica.triton.infers == 3


def test_a_checked_version_is_loaded_and_reported_an_unchecked_one_is_left_to_the_controller(replica):
    replica.agent.prepare()
    unchecked = replica.version("loading")
    assert replica.tick() == {} and replica.placed() == []
    checked = replica.version("loading", verified=True)
    assert replica.tick() == {"emb": [checked]}
    assert replica.placed() == [checked] and ("emb", unchecked) not in replica.triton.loaded


def test_a_draining_version_stays_until_the_controller_forgets_it_then_leaves_repository_and_disk(replica):
    old, new = replica.version("live"), replica.version("live")
    replica.agent.prepare()
    replica.triton.load("emb")
    replica.tick()
    replica.set_state(old, "draining", drain_started=replica.clock())
    assert replica.tick() == {"emb": [old, new]}
    replica.forget(old)
    assert replica.tick() == {"emb": [new]}
    assert replica.placed() == [new] and not (replica.models_dir / "emb" / old).exists()
    assert replica.triton.loaded == {("emb", new)}


def test_an_endpoint_left_without_versions_is_unloaded_and_leaves_the_repository(replica):
    version = replica.version("live")
    replica.agent.prepare()
    replica.triton.load("emb")
    replica.tick()
    replica.set_state(version, "rejected")  # rolled back and drained: no longer wanted anywhere
    assert replica.tick() == {}
    assert replica.triton.loaded == set() and not (replica.triton.repository / "emb").exists()


def test_a_version_failing_its_check_here_is_taken_out_and_tried_again_later(replica):
    replica.agent.prepare()
    replica.triton.answer = np.ones((2, UNIT_HIDDEN + 1), np.float32)
    version = replica.version("loading", verified=True)
    assert replica.tick() == {}
    assert replica.placed() == [] and replica.triton.loaded == set()
    replica.triton.answer = None
    assert replica.tick(seconds=0.5) == {}  # still in its backoff
    assert replica.tick(seconds=2.0) == {"emb": [version]}


def test_a_version_triton_refuses_does_not_keep_the_others_from_loading(replica):
    good = replica.version("live")
    replica.agent.prepare()
    replica.triton.load("emb")
    replica.tick()
    bad = replica.version("loading", verified=True)
    replica.triton.refuse = {bad}
    assert replica.tick() == {"emb": [good]}
    assert replica.placed() == [good] and replica.triton.loaded == {("emb", good)}


def test_an_unreachable_registry_holds_back_only_the_version_it_could_not_fetch(replica):
    replica.agent.prepare()
    replica.registry.reachable = False
    version = replica.version("loading", verified=True)
    assert replica.tick() == {}
    replica.registry.reachable = True
    assert replica.tick(seconds=3.0) == {"emb": [version]}


def test_while_the_registry_is_away_a_version_to_fetch_waits_without_a_backoff_and_it_is_said_once(replica, caplog):
    kept = replica.version("live")
    replica.agent.prepare()
    replica.triton.load("emb")
    replica.tick()
    replica.registry.reachable = False
    new = replica.version("loading", verified=True)
    caplog.set_level(logging.INFO, logger="triton-agent")
    for _ in range(30):
        assert replica.tick() == {"emb": [kept]}, "what it holds stays reported"
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said == [
        "registry unreachable; this replica keeps serving the versions it holds; the ones it lacks wait until it "
        "answers again"
    ]
    replica.registry.reachable = True
    assert replica.tick(seconds=0.1) == {"emb": [kept, new]}, "fetched on its return, not after a backoff"
    assert "the registry answers again after 29s" in [r.getMessage() for r in caplog.records]


def test_a_triton_restarted_while_the_registry_is_away_gets_back_every_version_it_has_on_disk(replica):
    live = [replica.version("live"), replica.version("live")]
    replica.agent.prepare()
    replica.registry.reachable = False
    replica.triton.restart()
    shutil.rmtree(replica.triton.repository)  # a fresh repository (an emptyDir): the fetched copies are still there
    assert replica.agent.prepare() == ["emb"] and replica.placed() == live and replica.fetches == 2
    replica.triton.load("emb")
    assert replica.tick() == {"emb": live}


def test_a_triton_that_does_not_answer_is_said_once_and_its_replica_reports_nothing(replica, caplog):
    version = replica.version("live")
    replica.agent.prepare()
    replica.triton.load("emb")
    replica.tick()
    assert replica.agent.probe_target == ("emb", version), "what the liveness probe infers on"
    replica.triton.up = False
    caplog.set_level(logging.INFO, logger="triton-agent")
    for _ in range(11):
        replica.tick()
    assert replica.reported() is None and replica.agent.probe_target is None
    assert [r.getMessage() for r in caplog.records] == [
        f"Triton does not answer (down, starting or wedged): {REPLICA} reports nothing"
    ]
    replica.triton.up = True
    assert replica.tick() == {"emb": [version]} and caplog.records[-1].getMessage() == "Triton answers again"


def test_after_a_restart_of_triton_versions_are_checked_again_before_they_are_reported(replica):
    version = replica.version("live")
    replica.agent.prepare()
    replica.triton.load("emb")
    replica.tick()
    replica.triton.up = False  # killed: the agent's supervisor starts it again, after `prepare`
    replica.triton.restart()
    assert replica.tick(seconds=11.0) is None
    replica.agent.prepare()
    replica.triton.up = True
    replica.triton.load("emb")
    assert replica.tick() == {"emb": [version]} and replica.triton.infers == 6


def test_a_version_triton_lost_while_running_is_loaded_again(replica):
    version = replica.version("live")
    replica.agent.prepare()
    replica.triton.load("emb")
    replica.tick()
    replica.triton.loaded.clear()  # e.g. a Triton someone else restarted with an empty model list
    assert replica.tick() == {"emb": [version]}
    assert replica.triton.loaded == {("emb", version)} and replica.fetches == 1


def test_the_liveness_probe_infers_on_the_newest_version_that_answered_here(replica):
    for _ in range(10):
        replica.version("live")
    replica.agent.prepare()
    replica.triton.load("emb")
    replica.tick()
    assert replica.agent.probe_target == ("emb", "10"), "the last to be drained (10, not '9' as text)"


def test_a_live_version_answering_wrongly_here_is_kept_since_the_gateways_route_to_it(replica):
    version = replica.version("live")
    replica.agent.prepare()
    replica.triton.load("emb")
    replica.triton.answer = np.ones((2, UNIT_HIDDEN + 1), np.float32)
    assert replica.tick() == {"emb": [version]}
    assert replica.triton.loaded == {("emb", version)}
    assert replica.agent.probe_target is None, "no liveness probe on it: it would restart Triton over and over"


def test_a_replica_is_known_by_the_address_the_gateways_reach_it_at(monkeypatch):
    monkeypatch.setenv("AGENT_GRPC_PORT", "9001")
    assert AgentSettings(address="127.0.0.2").replica_id == "127.0.0.2:9001"
    assert AgentSettings(address="0.0.0.0").replica_id == f"{socket.gethostname()}:9001"  # a pod: its name
    assert AgentSettings(address="0.0.0.0", replica="10.1.2.3:9001").replica_id == "10.1.2.3:9001"
    assert AgentSettings(address="0.0.0.0").http_url == "http://127.0.0.1:8000"


def test_the_agents_own_triton_cannot_run_the_container_rendering():
    with pytest.raises(ValueError, match="AGENT_START_TRITON=false"):
        AgentSettings(target="container")
    assert AgentSettings(target="container", start_triton=False, triton_http_url="http://triton:8000").target


def test_a_draining_version_a_restarted_triton_lost_is_not_fetched_and_loaded_again(replica):
    old, new = replica.version("live"), replica.version("live")
    replica.set_state(old, "draining", drain_started=replica.clock())
    assert replica.agent.prepare() == ["emb"] and replica.placed() == [new]
    replica.triton.load("emb")
    assert replica.tick() == {"emb": [new]} and replica.placed() == [new] and replica.fetches == 1


def test_files_changed_in_the_registry_after_the_controllers_check_are_never_served(replica, caplog):
    """The agent serves the bytes the controller checked (the hashes in the version's lineage), not whatever the
    registry holds now: a model file replaced and its manifest sealed again after the check is refused."""
    version = replica.version("live")
    manifest = json.loads((replica.model_dir / MANIFEST_FILE).read_text())
    (replica.model_dir / MODEL_FILE).write_bytes((replica.model_dir / MODEL_FILE).read_bytes() + b"\0")
    manifest["files"][MODEL_FILE] = sha256_file(replica.model_dir / MODEL_FILE)
    (replica.model_dir / MANIFEST_FILE).write_text(json.dumps(manifest))
    caplog.set_level(logging.ERROR)
    replica.tick()
    assert version not in replica.placed() and not (replica.models_dir / "emb" / version).exists()
    said = f"version {version} of 'emb': its {MANIFEST_FILE} is not the one the controller checked"
    assert any(said in r.getMessage() for r in caplog.records), caplog.text

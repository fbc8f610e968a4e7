"""CONTROLLER_PLACEMENT=agents: the gate from `loading` to `live` (`services.lifecycle.placement`, pure), and the
controller applying it tick by tick over a real state store, the fake registry and a Triton it must never touch:
a version is checked here, loaded by the replicas' agents, and live once every replica that reported lately holds
it."""

from __future__ import annotations

import numpy as np
import pytest

from services.controller import Controller
from services.controller.settings import ControllerSettings
from services.lifecycle import placement, transitions
from services.lifecycle.deployments import EndpointState, VersionState
from services.lifecycle.store import DeploymentStore
from tests.support.models import UNIT_HIDDEN, unit_model_dir
from tests.unit.controller.fakes import Clock, FakeMetrics, FakeRegistry, FakeTriton
from tests.unit.lifecycle.states import deployments

A, B = "127.0.0.2:8001", "127.0.0.3:8001"


# --- the rules ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("replicas", "ready"),
    [
        pytest.param({}, False, id="no replica reported: never live"),
        pytest.param({A: {"emb": ["1", "2"]}}, True, id="the one replica holds it"),
        pytest.param({A: {"emb": ["2"]}, B: {"emb": ["2"]}}, True, id="every replica holds it"),
        pytest.param({A: {"emb": ["2"]}, B: {"emb": ["1"]}}, False, id="one replica lacks it"),
        pytest.param({A: {"emb": ["2"]}, B: {}}, False, id="a replica holding nothing yet"),
        pytest.param({A: {"emb": ["2"]}, B: {"other": ["2"]}}, False, id="the same number of another endpoint"),
    ],
)
def test_a_version_is_ready_everywhere_only_when_every_reporting_replica_holds_it(replicas, ready):
    assert placement.ready_everywhere(replicas, "emb", "2") is ready


def test_the_replicas_lacking_a_version_are_named():
    assert placement.lacking({A: {"emb": ["2"]}, B: {"emb": ["1"]}, "c": {}}, "emb", "2") == [B, "c"]


def test_replicas_hold_live_checked_and_still_draining_versions_load_only_the_first_two_start_with_live_ones():
    item = EndpointState(
        versions={
            "1": VersionState(version="1", state="draining", drain_started=5.0),
            "2": VersionState(version="2", state="rejected", drain_started=5.0, reason="rolled back"),
            "3": VersionState(version="3", state="rejected", reason="its forward pass failed"),
            "10": VersionState(version="10", state="live"),
            "11": VersionState(version="11", state="loading", lineage={"registry": {"name": "m"}}),
            "12": VersionState(version="12", state="loading"),
        }
    )
    assert placement.wanted(item) == ["1", "2", "10", "11"]
    assert placement.to_load(item) == ["10", "11"]  # one out of traffic is kept where it is, never loaded again
    assert placement.wanted_at_start(item) == ["10"]
    assert item.versions["11"].verified() and not item.versions["12"].verified()


def test_only_a_loading_version_is_marked_verified():
    state = deployments(("1", "live"), ("2", "loading"))
    for version in ("1", "2"):
        transitions.mark_verified(state, "emb", version, model_dir="/m", lineage={"registry": {"name": "m"}})
    assert state.endpoints["emb"].versions["1"].lineage == {}
    assert state.endpoints["emb"].versions["2"].state == "loading"
    assert state.endpoints["emb"].versions["2"].verified()


# --- the controller -------------------------------------------------------------------------------------------------
class Fleet:
    """A controller with CONTROLLER_PLACEMENT=agents, and replicas that report as the test says."""

    def __init__(self, tmp_path):
        self.model_dir = unit_model_dir(tmp_path / "source")
        self.settings = ControllerSettings(
            run_dir=tmp_path / "run", placement="agents", replica_ttl=10.0, drain_seconds=3.0
        )
        self.registry, self.triton, self.clock = FakeRegistry(), FakeTriton(UNIT_HIDDEN), Clock()
        self.forward_answer = np.ones((2, UNIT_HIDDEN), np.float32)
        self.controller = Controller(
            self.settings,
            self.registry,
            self.triton,
            FakeMetrics(),
            clock=self.clock,
            monotonic=self.clock,
            forward=lambda model_dir, manifest: (
                self.forward_answer if self.forward_answer is not None else np.ones((2, manifest.output_dim))
            ),
        )
        self.store = DeploymentStore.open(self.settings.state_url)
        self.store.update(lambda s: transitions.set_auto_update(s, "emb", "m", 2))

    def report(self, replica: str, *versions: str) -> None:
        self.store.report_replica(replica, {"emb": list(versions)}, self.clock())

    def tick(self, seconds: float = 1.0) -> dict[str, str]:
        self.clock.advance(seconds)
        self.controller.tick()
        return {v: r.state for v, r in self.store.read().endpoints["emb"].versions.items()}


@pytest.fixture
def fleet(tmp_path) -> Fleet:
    return Fleet(tmp_path)


def test_a_checked_version_goes_live_only_once_every_replica_holds_it_and_no_triton_is_touched(fleet):
    version = fleet.registry.add("m", fleet.model_dir)
    assert fleet.tick() == {version: "loading"}
    record = fleet.store.read().endpoints["emb"].versions[version]
    assert record.verified() and record.lineage["registry"]["version"] == version
    assert fleet.tick() == {version: "loading"}  # no replica has reported
    fleet.report(A, version)
    fleet.report(B)
    assert fleet.tick() == {version: "loading"}
    fleet.report(B, version)
    assert fleet.tick() == {version: "live"}
    endpoint = fleet.store.read().endpoints["emb"]
    assert endpoint.contract_outputs[0].shape == [-1, UNIT_HIDDEN] and endpoint.versions[version].deployed_at
    assert fleet.triton.placed_dirs == {} and fleet.triton.loads == 0


def test_a_replica_silent_for_longer_than_the_ttl_no_longer_holds_a_version_back(fleet):
    version = fleet.registry.add("m", fleet.model_dir)
    fleet.tick()
    fleet.report(B)  # B reported once, then went away
    fleet.clock.advance(11.0)
    fleet.report(A, version)
    assert fleet.tick(seconds=0.0) == {version: "live"}


def test_a_version_failing_its_checks_is_rejected_before_any_replica_loads_it(fleet):
    fleet.forward_answer = np.full((2, UNIT_HIDDEN), np.nan, np.float32)
    version = fleet.registry.add("m", fleet.model_dir)
    assert fleet.tick() == {version: "rejected"}
    assert placement.wanted(fleet.store.read().endpoints["emb"]) == []
    assert fleet.registry.tags("m", version)["deployment"] == "rejected" and fleet.triton.loads == 0


def test_a_version_of_another_contract_checked_meanwhile_is_rejected_when_its_turn_comes(fleet, tmp_path):
    fleet.forward_answer = None  # each version answers with its own manifest's width
    first = fleet.registry.add("m", fleet.model_dir)
    other = fleet.registry.add("m", unit_model_dir(tmp_path / "classifier", task="classification"))
    assert fleet.tick() == {first: "loading", other: "loading"}  # both checked: no contract fixed yet
    fleet.report(A, first, other)
    assert fleet.tick() == {first: "live", other: "rejected"}
    assert "tensor contract differs" in fleet.store.read().endpoints["emb"].versions[other].reason


def test_drained_versions_are_forgotten_without_touching_triton_the_agents_unload_them(fleet):
    versions = [fleet.registry.add("m", fleet.model_dir) for _ in range(2)]
    fleet.tick()
    fleet.report(A, *versions)
    assert fleet.tick() == dict.fromkeys(versions, "live")
    newest = fleet.registry.add("m", fleet.model_dir)
    fleet.tick()
    fleet.report(A, *versions, newest)
    assert fleet.tick() == {versions[0]: "draining", versions[1]: "live", newest: "live"}
    assert fleet.tick(seconds=3.0) == {versions[1]: "live", newest: "live"}
    assert not (fleet.settings.models_dir / "emb" / versions[0]).exists()
    assert fleet.triton.loads == 0 and fleet.triton.placed_dirs == {}

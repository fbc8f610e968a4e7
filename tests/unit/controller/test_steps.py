"""The controller's steps, declared once at start for its placement (CONTROLLER_PLACEMENT): which run, in which
order, which need the registry (skipped while it does not answer: `test_controller`), and which deployer and unload
step each placement gets."""

from __future__ import annotations

import pytest

from services.controller.deploy import Deployer, ReplicaDeployer
from services.controller.loop import Controller
from services.controller.settings import ControllerSettings, Placement
from tests.unit.controller.fakes import FakeMetrics, FakeRegistry, FakeTriton


def controller(tmp_path, placement: str) -> Controller:
    settings = ControllerSettings(run_dir=tmp_path / "run", placement=placement)
    return Controller(settings, FakeRegistry(), FakeTriton(8), FakeMetrics())


@pytest.mark.parametrize(
    ("placement", "names", "deployer", "unload"),
    [
        (
            "local",
            ["discover", "deploy_loading", "reconcile", "advance_rollout", "prune", "unload_drained"],
            Deployer,
            "unload_drained",
        ),
        (
            "agents",
            ["discover", "deploy_loading", "advance_rollout", "prune", "unload_drained"],
            ReplicaDeployer,
            "forget_drained",
        ),
    ],
)
def test_the_placement_chosen_at_start_sets_the_steps_and_the_deployer(tmp_path, placement, names, deployer, unload):
    steps = controller(tmp_path, placement).steps
    assert [step.name for step in steps] == names
    assert [step.name for step in steps if step.needs_registry] == ["discover"]
    assert type(steps[0].run.__self__) is deployer
    assert steps[-1].run.__name__ == unload


def test_the_placement_is_read_from_its_variable_as_the_enum(tmp_path, monkeypatch):
    monkeypatch.setenv("CONTROLLER_PLACEMENT", "agents")
    assert ControllerSettings(run_dir=tmp_path).placement is Placement.AGENTS
    monkeypatch.setenv("CONTROLLER_PLACEMENT", "elsewhere")
    with pytest.raises(ValueError, match="'local' or 'agents'"):
        ControllerSettings(run_dir=tmp_path)

"""A crafted deployment state never makes the controller touch a path outside its own directories. The attack: a state
(a restored backup, or a row written straight into a shared store) whose endpoint is `../../...<dir>` with version
`important` draining; the controller unloaded it, `shutil.rmtree` removing `<dir>/important` (the repository's and
the models directory's copy) before Triton's refusal. Now the state is refused on read (said once, nothing done) and
the file operations refuse an outside path even when given one."""

from __future__ import annotations

import json
import logging

import pytest

from services.common.confined import OutsideBase
from services.controller.triton_sync import TritonSync
from services.lifecycle.deployments import StateInvalid
from services.triton.model_control import TritonModels
from services.triton.repository import RenderOptions
from tests.support.state import escaping, victim_dir, write_document


@pytest.fixture
def victim(tmp_path):
    return victim_dir(tmp_path)


def intact(victim) -> bool:
    return (victim / "important" / "keep").is_file()


def test_the_controller_refuses_the_state_says_why_once_and_touches_nothing(world, victim, caplog):
    world.tick()  # the last good state: endpoint `emb`
    world.settings.models_dir.mkdir(parents=True)  # as it is once a version was deployed
    write_document(world.store, escaping(victim))
    with caplog.at_level(logging.WARNING, logger="controller"):
        for _ in range(5):
            world.controller.tick()
            world.clock.advance(10.0)
    assert intact(victim)
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1 and "is invalid: endpoints.../../../" in said[0] and "[key]: endpoint name" in said[0]
    assert "keeping the last good state (1 endpoints), acting on none" in said[0]


def test_unloading_with_the_real_repository_refuses_the_state_and_then_the_path(world, victim, tmp_path):
    """Through `TritonSync.unload_drained` and the real `TritonModels` (its Triton away, as in the attack)."""
    (tmp_path / "repository").mkdir()  # as Triton was started with it
    triton = TritonModels(tmp_path / "repository", "http://127.0.0.1:1", RenderOptions(), control_key="k")
    sync = TritonSync(world.settings, world.store, triton, world.clock)
    write_document(world.store, escaping(victim))
    name = next(iter(json.loads(escaping(victim))["endpoints"]))
    world.clock.advance(100.0)
    with pytest.raises(StateInvalid):
        sync.unload_drained(name)
    with pytest.raises(OutsideBase):
        triton.remove(name, "important")  # given the names anyway
    assert intact(victim)


def test_fetch_and_reject_refuse_a_path_outside_the_models_directory_even_when_given_one(world, victim):
    deployer = world.controller.steps[0].run.__self__  # the controller's `Deployer`
    world.settings.models_dir.mkdir(parents=True)
    name = next(iter(json.loads(escaping(victim))["endpoints"]))
    world.register()
    with pytest.raises(OutsideBase):
        deployer.fetch(name, "m", "1")
    with pytest.raises(OutsideBase):
        deployer.reject(name, "m", "important", "a reason")
    assert intact(victim) and sorted(p.name for p in victim.iterdir()) == ["important"], "nothing fetched there"

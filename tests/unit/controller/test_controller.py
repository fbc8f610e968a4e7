"""The controller's decisions on deployment, draining and Triton, tick by tick, on a real deployment state store
(`world.py`), with fakes of its own seams behind the Protocols of `services.lifecycle.ports` (`fakes.py`: registry,
Triton, gateway metrics, a clock) and a forward pass that answers without ONNX Runtime (the unit tier's model
directories cannot run one). Fakes of the project's own seams are fine in the unit tier;
`tests/integration/lifecycle` drives the same controller with MLflow, Triton and the gateway for real."""

from __future__ import annotations

import logging

import numpy as np

from services.common.contract import MODEL_FILE
from services.common.errors import NotFound
from services.lifecycle import transitions
from tests.support.models import UNIT_HIDDEN, unit_model_dir
from tests.support.state import stored
from tests.unit.controller.world import World


def test_new_registry_versions_are_found_and_only_the_newest_max_versions_deployed(world):
    for _ in range(3):
        world.register()
    world.register(deployment="rejected")
    world.tick()
    assert world.states() == {"2": "live", "3": "live"}
    assert world.serving() == {"2", "3"}


def test_a_deployed_version_is_live_with_its_files_lineage_and_the_endpoints_contract(world):
    version = world.register()
    endpoint = world.tick()
    record = endpoint.versions[version]
    assert record.state == "live" and record.deployed_at and record.lineage["registry"] == {"name": "m", "version": "1"}
    assert (world.settings.models_dir / "emb" / "1" / "model" / MODEL_FILE).is_file()
    assert record.model_dir == str(world.settings.models_dir / "emb" / "1" / "model")
    assert endpoint.contract_outputs[0].shape == [-1, UNIT_HIDDEN]
    assert world.serving() == {"1"} and world.registry.tags("m", version) == {}


def test_a_version_whose_artifacts_changed_is_rejected_tagged_and_never_placed(world, tmp_path):
    corrupt = unit_model_dir(tmp_path / "corrupt")
    with open(corrupt / MODEL_FILE, "ab") as handle:
        handle.write(b"changed in storage")
    version = world.registry.add("m", corrupt)
    record = world.tick().versions[version]
    assert record.state == "rejected" and "does not match its manifest hash" in record.reason
    tags = world.registry.tags("m", version)
    assert tags["deployment"] == "rejected" and tags["deployment.reason"] == record.reason
    assert not world.triton.placed("emb", version) and world.triton.loads == 0


def test_a_version_registered_from_no_run_is_rejected_and_the_next_one_goes_live(world):
    fetch = world.registry.fetch

    def no_run_for_the_first(name, version, dest):
        if version == "1":  # what the MLflow adapter raises for it (`run_of`)
            raise NotFound(f"version 1 of '{name}' was registered from no run, so it has no files to fetch")
        return fetch(name, version, dest)

    world.registry.fetch = no_run_for_the_first
    first, second = world.register(), world.register()
    for _ in range(5):
        world.tick(1.0)
    assert world.states() == {first: "rejected", second: "live"}
    assert "registered from no run" in world.registry.tags("m", first)["deployment.reason"]


def test_a_version_failing_its_forward_pass_is_rejected(world):
    world.forward_answer = np.full((2, UNIT_HIDDEN), np.nan, np.float32)
    version = world.register()
    assert world.tick().versions[version].reason == "the model's output has NaN or infinite values"
    assert world.registry.tags("m", version)["deployment"] == "rejected"


def test_a_version_answering_wrongly_through_triton_is_taken_out_of_it(world):
    world.triton.answer = np.ones((2, UNIT_HIDDEN + 1), np.float32)
    version = world.register()
    record = world.tick().versions[version]
    assert record.state == "rejected" and "does not match the manifest's" in record.reason
    assert not world.triton.placed("emb", version) and world.serving() == set()


def test_a_version_with_another_contract_than_the_endpoint_is_rejected(world, tmp_path):
    world.register()
    world.tick()
    other = unit_model_dir(tmp_path / "classifier", task="classification")
    version = world.registry.add("m", other)
    world.forward_answer = np.ones((2, 2), np.float32)
    assert "tensor contract differs" in world.tick().versions[version].reason
    assert world.serving() == {"1"}


def test_triton_unavailable_is_retried_with_growing_backoff_and_the_version_is_not_rejected(world):
    world.triton.up = False
    version = world.register()
    key = "deploy_loading:emb"
    assert world.tick().versions[version].state == "loading"
    assert world.controller.backoff[key] == world.clock.now + 2
    world.triton.up = True
    assert world.tick(1.0).versions[version].state == "loading", "not retried before its backoff is over"
    world.triton.up = False
    world.tick(1.0)
    assert world.controller.backoff[key] == world.clock.now + 4, "exponential"
    world.triton.up = True
    assert world.tick(4.0).versions[version].state == "live"
    assert key not in world.controller.backoff and key not in world.controller.failures
    assert "deployment" not in world.registry.tags("m", version)


def test_a_step_failing_for_days_keeps_its_backoff_at_the_cap(world):
    """2**failures overflows a float past 1023 failures: the backoff must stay at its cap, not raise in the loop."""
    world.triton.up = False
    world.register()
    key = "deploy_loading:emb"
    world.tick()
    world.controller.failures[key] = 5000
    world.tick(world.controller.settings.max_backoff)
    assert world.controller.backoff[key] == world.clock.now + world.controller.settings.max_backoff


def test_an_unreachable_registry_holds_back_discovery_only_is_said_once_and_its_return_deploys_at_once(world, caplog):
    world.register()
    world.tick()
    world.registry.reachable = False
    world.register()
    caplog.set_level(logging.INFO, logger="controller")
    for _ in range(20):
        world.tick(1.0)
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1 and "registry unreachable; the deployed versions keep serving" in said[0], said
    assert world.serving() == {"1"} and "2" not in world.states() and world.controller.backoff == {}
    world.registry.reachable = True
    assert world.tick(0.1).versions["2"].state == "live", "not left in a backoff of up to 30 s"
    assert "the registry answers again after 19s" in [r.getMessage() for r in caplog.records]


def test_a_step_failing_on_and_on_is_said_once_at_warning_its_retries_at_info(world, caplog):
    world.triton.up = False
    world.register()
    caplog.set_level(logging.INFO, logger="controller")
    for seconds in (0, 2, 4, 8):
        world.tick(seconds)
    failed = [(r.levelname, r.getMessage()) for r in caplog.records if "deploy_loading:emb failed" in r.getMessage()]
    assert [level for level, _ in failed] == ["WARNING", "INFO", "INFO", "INFO"], failed
    world.triton.up = True
    world.tick(16)
    assert caplog.records[-1].getMessage() == "deploy_loading:emb works again"


def test_versions_beyond_max_versions_drain_then_leave_triton_and_the_disk(tmp_path):
    world = World(tmp_path, max_versions=1)
    world.register()
    world.tick()
    world.register()
    endpoint = world.tick()
    assert world.states() == {"1": "draining", "2": "live"} and endpoint.versions["1"].drain_started == world.clock.now
    assert world.serving() == {"1", "2"}, "still answering what the workers sent before they saw the change"
    world.tick(2.9)
    assert world.serving() == {"1", "2"}
    world.tick(0.1)
    assert world.states() == {"2": "live"} and world.serving() == {"2"}
    assert not (world.settings.models_dir / "emb" / "1").exists()


def test_a_removed_version_is_unloaded_after_the_drain_time(world):
    world.register()
    world.register()
    world.tick()
    world.store.update(lambda s: transitions.remove(s, "emb", "1", world.clock()))
    world.tick(1.0)
    assert world.states() == {"1": "draining", "2": "live"}
    world.tick(2.0)
    assert world.states() == {"2": "live"} and world.serving() == {"2"}


def test_live_versions_are_loaded_again_after_triton_restarts(world):
    world.register()
    world.register()
    world.tick()
    world.triton.restart()
    before = stored(world.store)
    world.tick()
    assert world.serving() == {"1", "2"}
    assert stored(world.store) == before, "the state already said so"

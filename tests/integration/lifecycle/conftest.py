"""Fixtures of the lifecycle tests: one stack for the module, tiny checkpoints that differ."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.lifecycle import Stack


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Tiny checkpoints: three good ones that differ, one of another width."""
    from services.modelbuild.tiny import write_tiny_checkpoint

    base = tmp_path_factory.mktemp("checkpoints")
    return {
        "a": write_tiny_checkpoint(base / "a", seed=0),
        "b": write_tiny_checkpoint(base / "b", seed=1),
        "c": write_tiny_checkpoint(base / "c", seed=2),
        "wide": write_tiny_checkpoint(base / "wide", seed=4, hidden=64),
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory, tiny_model):
    stack = Stack(tmp_path_factory.mktemp("lifecycle"), tiny_model)
    yield stack
    stack.launcher.stop_all()

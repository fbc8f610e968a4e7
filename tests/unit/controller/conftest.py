"""The `world` fixture: a controller and its fakes (`world.py`), fresh for each test."""

from __future__ import annotations

import pytest

from tests.unit.controller.world import World


@pytest.fixture
def world(tmp_path) -> World:
    return World(tmp_path)

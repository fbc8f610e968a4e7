"""A real Triton serving the tiny model's encoder, and a gateway in front of it: one of each per test module."""

from __future__ import annotations

import pytest

from services.triton.repository import RenderOptions
from tests.support.servers import start_gateway, start_triton


@pytest.fixture(scope="module")
def triton(tmp_path_factory, tiny_model):
    server = start_triton(
        tmp_path_factory.mktemp("gw-triton"), tiny_model, RenderOptions(batching=True), models=("encoder",)
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, tiny_model, triton):
    server = start_gateway(tmp_path_factory.mktemp("gateway"), tiny_model, triton)
    yield server
    server.launcher.stop_all()

"""Schemathesis against the OpenAPI document of both HTTP stacks: every operation, generated cases from the schema
(and outside it), no 5xx, every response conforming to what the document declares (status codes, content types,
bodies). `positive_data_acceptance` is left out: a schema-valid request may still name an endpoint that does not
exist or a dimension the model does not have (404/422, both declared)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from services.triton.repository import RenderOptions
from tests.support.servers import start_gateway, start_http_stack, start_triton

SCHEMATHESIS = str(Path(sys.executable).parent / "schemathesis")


def fuzz(url: str, *headers: str, examples: int = 60) -> subprocess.CompletedProcess:
    argv = [
        SCHEMATHESIS,
        "run",
        f"{url}/openapi.json",
        "--exclude-checks",
        "positive_data_acceptance",
        "-n",
        str(examples),
        "--seed",
        "7",
        "--request-timeout",
        "15",
        "--generation-deterministic",
    ]
    for header in headers:
        argv += ["-H", header]
    return subprocess.run(argv, capture_output=True, text=True, timeout=400)


def test_fastapi_stack_fuzz(tmp_path, tiny_model):
    server = start_http_stack(tmp_path, tiny_model, workers=2)
    try:
        result = fuzz(server.url)
    finally:
        server.launcher.stop_all()
    assert result.returncode == 0, result.stdout[-4000:]
    assert "generated" in result.stdout


@pytest.fixture
def gateway(tmp_path, tiny_model):
    triton = start_triton(tmp_path / "triton", tiny_model, RenderOptions(batching=True), models=("encoder",))
    (tmp_path / "gateway").mkdir()
    env = {"GATEWAY_ADMIN_TOKEN": "fuzz-admin-token", "GATEWAY_DEPLOYMENTS_FILE": str(tmp_path / "deployments.json")}
    server = start_gateway(tmp_path / "gateway", tiny_model, triton, env=env)
    yield server
    server.launcher.stop_all()
    triton.stop()


def test_gateway_fuzz_with_the_admin_token(gateway):
    result = fuzz(gateway.url, "Authorization: Bearer fuzz-admin-token")
    assert result.returncode == 0, result.stdout[-4000:]

"""Schemathesis against the OpenAPI document of both HTTP stacks: every operation, every phase (the schema's
examples, its coverage of boundaries and of values outside it, random fuzzing, stateful sequences), no 5xx, every
response conforming to what the document declares (status codes, content types, bodies). `positive_data_acceptance`
is left out: a schema-valid request may still name an endpoint that does not exist or a dimension the model does
not have (404/422, both declared). `schemathesis.toml` draws path parameters mostly from the names the stacks serve,
so that generated bodies reach the code that reads them (issue 21: the v2 edge's 500s were found that way).
Examples per operation are few to keep the run short (`make test`); `FUZZ_EXAMPLES` asks for more."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.triton.repository import RenderOptions
from tests.support.servers import start_gateway, start_http_stack, start_triton

SCHEMATHESIS = str(Path(sys.executable).parent / "schemathesis")
CONFIG = Path(__file__).with_name("schemathesis.toml")
PHASES = "examples,coverage,fuzzing,stateful"
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))


def fuzz(url: str, *headers: str, examples: int = EXAMPLES) -> subprocess.CompletedProcess:
    argv = [
        SCHEMATHESIS,
        "--config-file",
        str(CONFIG),
        "run",
        f"{url}/openapi.json",
        "--phases",
        PHASES,
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
    started = time.monotonic()
    result = subprocess.run(argv, capture_output=True, text=True, timeout=400)
    summary = [line.strip() for line in result.stdout.splitlines() if " generated, " in line or "Scenarios" in line]
    print(f"schemathesis, {examples} examples per operation: {summary} in {time.monotonic() - started:.1f} s")
    return result


def test_fastapi_stack_fuzz(tmp_path, tiny_model):
    server = start_http_stack(tmp_path, tiny_model, workers=2)
    try:
        result = fuzz(server.url)
    finally:
        server.launcher.stop_all()
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "generated" in result.stdout


@pytest.fixture
def gateway(tmp_path, tiny_model):
    triton = start_triton(tmp_path / "triton", tiny_model, RenderOptions(batching=True), models=("encoder",))
    (tmp_path / "gateway").mkdir()
    env = {"GATEWAY_ADMIN_TOKEN": "fuzz-admin-token", "SERVING_STATE_URL": f"sqlite:///{tmp_path / 'state.db'}"}
    server = start_gateway(tmp_path / "gateway", tiny_model, triton, env=env)
    yield server
    server.launcher.stop_all()
    triton.stop()


def test_gateway_fuzz_with_the_admin_token(gateway):
    result = fuzz(gateway.url, "Authorization: Bearer fuzz-admin-token")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]

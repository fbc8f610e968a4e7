"""Triton's liveness probe against a small server shaped like Triton's HTTP API: it passes only when an inference
answers within the deadline, whatever the health endpoints say (a stub that is not healthy: 500; a hung model: no
answer; a stopped server: the kernel accepts the connection, nobody reads it)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from services.triton.liveness import InferenceProbe, ProbeFailed, main, probe_request

ENCODER = {
    "name": "encoder",
    "inputs": [
        {"name": "input_ids", "datatype": "INT64", "shape": [-1, -1]},
        {"name": "attention_mask", "datatype": "INT64", "shape": [-1, -1]},
    ],
    "outputs": [{"name": "embedding", "datatype": "FP32", "shape": [-1, 32]}],
}


class FakeTriton(BaseHTTPRequestHandler):
    mode = "ok"  # ok | unhealthy | hang
    bodies: list[dict] = []
    paths: list[str] = []

    def log_message(self, *args) -> None:
        pass

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # metadata and health answer whatever the model does
        self.paths.append(self.path)
        self._answer(200, ENCODER if self.path.startswith("/v2/models/encoder") else {})

    def do_POST(self) -> None:
        self.paths.append(self.path)
        self.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        if self.mode == "hang":
            time.sleep(3)
        if self.mode == "unhealthy":
            self._answer(500, {"error": "Stub process 'encoder_0_0' is not healthy."})
        else:
            self._answer(200, {"outputs": [{"name": "embedding", "shape": [1, 32], "data": [0.0] * 32}]})


@pytest.fixture
def triton():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeTriton)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    FakeTriton.mode, FakeTriton.bodies, FakeTriton.paths = "ok", [], []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_the_request_is_one_element_of_each_input_from_the_models_metadata():
    ensemble = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [-1, 1]}]}
    assert probe_request(ensemble) == {
        "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": ["ok"]}]
    }
    assert probe_request(ENCODER)["inputs"][1] == {
        "name": "attention_mask",
        "datatype": "INT64",
        "shape": [1, 1],
        "data": [1],
    }


def test_a_healthy_server_passes_and_its_request_is_built_once(triton):
    probe = InferenceProbe(triton, "encoder")
    probe(2.0)
    probe(2.0)
    assert FakeTriton.bodies == [probe_request(ENCODER)] * 2
    assert main(["--url", triton, "--model", "encoder", "--timeout", "2"]) == 0


def test_a_probe_of_one_version_asks_that_version(triton):
    InferenceProbe(triton, "encoder", "3")(2.0)
    assert FakeTriton.paths == ["/v2/models/encoder/versions/3", "/v2/models/encoder/versions/3/infer"]
    assert FakeTriton.bodies == [probe_request(ENCODER)]


def test_a_failing_model_fails_the_probe_while_health_says_200(triton):
    FakeTriton.mode = "unhealthy"
    with pytest.raises(ProbeFailed, match="answered 500: .*Stub process 'encoder_0_0' is not healthy"):
        InferenceProbe(triton, "encoder")(2.0)
    assert main(["--url", triton, "--model", "encoder", "--timeout", "2"]) == 1


def test_a_hung_model_fails_the_probe_at_its_deadline(triton):
    FakeTriton.mode = "hang"
    started = time.monotonic()
    with pytest.raises(ProbeFailed, match="timed out"):
        InferenceProbe(triton, "encoder")(0.5)
    assert time.monotonic() - started < 1.5


def test_a_stopped_server_fails_the_probe_at_its_deadline():
    with socket.socket() as stopped:  # listens (the kernel completes the handshake) but never reads: SIGSTOP
        stopped.bind(("127.0.0.1", 0))
        stopped.listen()
        started = time.monotonic()
        with pytest.raises(ProbeFailed, match="timed out"):
            InferenceProbe(f"http://127.0.0.1:{stopped.getsockname()[1]}", "encoder")(0.5)
        assert time.monotonic() - started < 1.5


def template_probes() -> dict[str, list[str]]:
    """The liveness command of Triton in the Kubernetes base and the Compose file."""
    import yaml

    root = Path(__file__).resolve().parents[3] / "deploy"
    documents = yaml.safe_load_all((root / "k8s" / "base" / "triton.yaml").read_text())
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    container = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "triton")
    compose = yaml.safe_load((root / "compose" / "docker-compose.yml").read_text())
    return {
        "kubernetes": container["livenessProbe"]["exec"]["command"],
        "compose": compose["services"]["triton"]["healthcheck"]["test"][1:],
    }


@pytest.mark.parametrize("where", ["kubernetes", "compose"])
def test_the_templates_run_this_probe_on_the_model_their_triton_loads(triton, where):
    command = template_probes()[where]
    assert command[:3] == ["python3", "-m", "services.triton.liveness"] and "--model=encoder" in command
    argv = [sys.executable, *command[1:]]
    argv = [f"--url={triton}" if arg.startswith("--url=") else arg for arg in argv]
    assert subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
    FakeTriton.mode = "unhealthy"
    failed = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert failed.returncode == 1 and "Stub process 'encoder_0_0' is not healthy" in failed.stderr

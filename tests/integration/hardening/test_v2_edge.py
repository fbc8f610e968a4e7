"""The v2 (Open Inference Protocol) edge over real sockets (issue 21): every malformed request of the issue is a 4xx
naming the field, the same alone or coalesced with other requests, and no error answer costs the client its
keep-alive connection. Before: 500s (or 200s), and uvicorn dropped the connection after each 500 without a
`Connection: close`, so the next request on it failed."""

from __future__ import annotations

import http.client
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest
import uvicorn
from fastapi import FastAPI

from services.api.errors import install_error_handlers
from services.common.errors import Unavailable
from services.launcher import free_port
from tests.support.servers import start_http_stack
from tests.support.v2_cases import ISSUE_21, Body, as_json, tensor

INFER = "/v2/models/minilm/infer"
VALID = as_json(tensor(["a valid text"]))


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model):
    """One worker that coalesces (as the gateway does by default): concurrent requests share one batch."""
    server = start_http_stack(
        tmp_path_factory.mktemp("v2edge"), tiny_model, workers=1, env={"SERVING_COALESCE": "true"}
    )
    yield server
    server.launcher.stop_all()


def connect(url: str) -> http.client.HTTPConnection:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.connect()
    return connection


def post(connection: http.client.HTTPConnection, body: Body, path: str = INFER) -> tuple[int, dict, bool]:
    """(status, JSON body, whether the server said it closes the connection) over `connection`, kept alive."""
    headers = {"content-type": "application/json"}
    if body[1] is not None:
        headers["inference-header-content-length"] = body[1]
    connection.request("POST", path, body[0], headers)
    response = connection.getresponse()
    return response.status, orjson.loads(response.read()), response.will_close


def answer(server, body: Body) -> tuple[int, str | None]:
    """The status and error message (request id aside) of `body` on a fresh connection."""
    connection = connect(server.url)
    try:
        status, payload, _ = post(connection, body)
    finally:
        connection.close()
    return status, payload.get("error", {}).get("message")


def test_every_malformed_request_is_a_4xx_naming_the_field_on_one_connection(server):
    connection = connect(server.url)
    local = connection.sock.getsockname()
    answers = {}
    for case, (body, field) in ISSUE_21.items():
        status, payload, closing = post(connection, body)
        answers[case] = status
        print(f"{case}: {status} {payload['error']['message']}")
        assert 400 <= status < 500, (case, payload)
        assert payload["error"]["param"] == field, (case, payload)
        assert not closing and connection.sock.getsockname() == local, f"{case}: the connection was dropped"
    status, payload, closing = post(connection, VALID, "/v2/models/nope/infer")  # refused before its body is read
    assert status == 404 and not closing
    status, payload, _ = post(connection, VALID)
    assert status == 200 and payload["outputs"][0]["shape"][0] == 1
    assert connection.sock.getsockname() == local  # every request of the test on one keep-alive connection
    connection.close()


@pytest.mark.parametrize("case", ["empty tensor", "zero-size binary tensor", "ragged data", "binary tensor of 5 bytes"])
def test_the_same_answer_alone_or_batched_with_others(server, case):
    """Before: the empty tensor was a 500 alone and a 200 inside a coalesced batch."""
    body = ISSUE_21[case][0]
    alone = answer(server, body)
    with ThreadPoolExecutor(16) as pool:
        for _ in range(3):
            others = [pool.submit(answer, server, VALID) for _ in range(12)]
            batched = pool.submit(answer, server, body)
            more = [pool.submit(answer, server, VALID) for _ in range(12)]
            assert batched.result() == alone
            assert {future.result()[0] for future in others + more} == {200}
    assert 400 <= alone[0] < 500
    print(f"{case}: {alone[0]} alone and batched: {alone[1]}")


def failing_app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/boom")
    async def boom():
        raise RuntimeError("a bug nothing expected")

    @app.get("/unavailable")
    async def unavailable():
        raise Unavailable("Triton is down", retry_after=1)

    @app.get("/ok")
    async def ok():
        return {"ok": True}

    return app


@pytest.fixture
def failing_server():
    """The error edge in the server the stacks run (uvicorn with httptools), on a free port in this process."""
    port = free_port()
    config = uvicorn.Config(
        failing_app(), host="127.0.0.1", port=port, http="httptools", lifespan="off", log_level="error"
    )
    uvicorn_server = uvicorn.Server(config)
    thread = threading.Thread(target=uvicorn_server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uvicorn_server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    uvicorn_server.should_exit = True
    thread.join(10)


def test_a_5xx_leaves_the_keep_alive_connection_usable(failing_server):
    connection = connect(failing_server)
    local = connection.sock.getsockname()
    for path, status in [("/boom", 500), ("/ok", 200), ("/unavailable", 503), ("/ok", 200), ("/boom", 500)]:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        assert response.status == status
        # a connection the server drops must say so; this one is kept: the next request goes on the same socket
        assert not response.will_close and connection.sock.getsockname() == local, path
    connection.close()

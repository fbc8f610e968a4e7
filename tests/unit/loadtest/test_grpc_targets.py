"""gRPC targets: the `ModelInfer` call they carry is one the gateway's gRPC edge reads; the engine sends them over a
real gRPC socket, open and closed loop, recording each status as the HTTP status it stands for; the matrix's
`protocol` axis names its rows and refuses stacks without a gRPC edge."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest
from tritonclient.grpc import service_pb2 as pb

from loadtest.engine import AttackSpec, attack, closed_run, http_code
from loadtest.matrix.config import MatrixConfig
from loadtest.matrix.measure import Measurement
from loadtest.matrix.report import caveats
from loadtest.stackrun import running_stack
from loadtest.targets import GRPC_INFER, build_target, build_targets, grpc_address
from services.api.v2_grpc import parse_infer


def test_a_grpc_target_is_a_model_infer_call_the_gateway_reads():
    target = build_target("grpc://127.0.0.1:9/", "grpc", ["héllo", "b"], endpoint="minilm")
    assert target.url == f"grpc://127.0.0.1:9{GRPC_INFER}" and target.method == "GRPC"
    assert grpc_address(target.url) == ("127.0.0.1:9", GRPC_INFER)
    request = pb.ModelInferRequest.FromString(target.body)
    assert request.model_name == "minilm"
    assert [(t.name, t.datatype, list(t.shape)) for t in request.inputs] == [("TEXT", "BYTES", [2, 1])]
    assert parse_infer(request, "embedding").texts == ["héllo", "b"]
    assert len(build_targets("grpc://h:1", "grpc", ["a", "b", "c", "d"], per_request=2)) == 2
    with pytest.raises(ValueError, match="grpc://HOST:PORT"):
        build_target("http://h:1", "grpc", ["a"])
    with pytest.raises(ValueError, match="grpc://HOST:PORT/SERVICE/METHOD"):
        grpc_address("grpc://h:1")


@pytest.mark.parametrize(
    "status, code",
    [
        (grpc.StatusCode.OK, 200),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, 429),
        (grpc.StatusCode.UNAVAILABLE, 503),
        (grpc.StatusCode.DEADLINE_EXCEEDED, 504),
        (grpc.StatusCode.INVALID_ARGUMENT, 400),
        (grpc.StatusCode.NOT_FOUND, 404),
        (grpc.StatusCode.INTERNAL, 500),
        (grpc.StatusCode.UNAUTHENTICATED, 500),
    ],
)
def test_grpc_statuses_are_recorded_as_the_http_status_they_stand_for(status, code):
    assert http_code(status) == code


@pytest.fixture
def echo_server():
    """A real gRPC server on a free port: `ModelInfer` answers the request's bytes back, or RESOURCE_EXHAUSTED with
    a retry-after for a request whose model is `busy`; every call's metadata is kept."""
    seen: list[dict] = []

    def infer(body: bytes, context):
        seen.append(dict(context.invocation_metadata()))
        if pb.ModelInferRequest.FromString(body).model_name == "busy":
            context.set_trailing_metadata((("retry-after", "2"),))
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "queue full")
        return body

    handler = grpc.method_handlers_generic_handler(
        "inference.GRPCInferenceService", {"ModelInfer": grpc.unary_unary_rpc_method_handler(infer)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(4), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"grpc://127.0.0.1:{port}", seen
    server.stop(None)


def test_the_engine_sends_grpc_targets_closed_and_open_loop(echo_server):
    base, seen = echo_server
    ok = build_target(base, "grpc", ["a"])
    keyed = type(ok)(ok.method, ok.url, ok.body, {"Authorization": "Bearer k"})
    results, stats = closed_run([keyed], seconds=0.5, concurrency=2)
    assert results and stats.sent == len(results)
    assert {r.code for r in results} == {200} and all(r.bytes_in == len(ok.body) for r in results)
    assert seen[0]["authorization"] == "Bearer k", "a target's headers go as the call's metadata"

    busy = build_target(base, "grpc", ["a"], endpoint="busy")
    opened: list = []
    attack(AttackSpec(targets=[ok, busy], rate=40, duration=0.5), opened.append)
    assert sorted({r.code for r in opened}) == [200, 429]
    shed = next(r for r in opened if r.code == 429)
    assert shed.retry_after == "2" and "RESOURCE_EXHAUSTED" in shed.error and "queue full" in shed.error


def test_nothing_listening_is_recorded_as_unavailable():
    results, _ = closed_run([build_target("grpc://127.0.0.1:1", "grpc", ["a"])], seconds=0.2, concurrency=1)
    assert results and {r.code for r in results} == {503} and "UNAVAILABLE" in results[0].error


def test_a_protocol_axis_names_its_rows_and_is_for_the_gateway_only():
    config = MatrixConfig(configs=[{"stack": "clearml", "workers": [1], "protocol": ["http", "grpc"]}])
    assert [(r.name, r.protocol) for r in config.runs()] == [("clearml-w1-on", "http"), ("clearml-w1-on-grpc", "grpc")]
    assert MatrixConfig(configs=[{"stack": "clearml"}]).runs()[0].protocol == "http"
    assert "rows marked grpc send the load over the gateway's gRPC edge" in caveats(config, 40.0, False)
    label = Measurement("clearml", 1, True, "bound", 0, 1, 1, 1, 1, 1, 1, 1, protocol="grpc").label
    assert label == "clearml w1 batching on grpc"
    with pytest.raises(ValueError, match="protocol = \\[\"grpc\"\\] is for stack clearml only.*not stack 'triton'"):
        MatrixConfig(configs=[{"stack": "triton", "protocol": ["grpc"]}]).runs()
    with pytest.raises(ValueError, match="protocol must be one of http, grpc, not 'h3'"):
        MatrixConfig(configs=[{"stack": "clearml", "protocol": ["h3"]}]).runs()


def test_running_stack_refuses_grpc_for_a_stack_without_a_grpc_edge(tmp_path):
    with (
        pytest.raises(ValueError, match="protocol grpc is for stack clearml only.*'fastapi'"),
        running_stack("fastapi", tmp_path, protocol="grpc"),
    ):
        pass

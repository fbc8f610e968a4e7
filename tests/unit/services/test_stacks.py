"""What `serving up` starts for each STACK: process specs, checked without starting them."""

import json
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from services.common.errors import ConfigurationError
from services.stacks import (
    STACKS,
    StackOptions,
    Tuning,
    metrics_dir,
    port_claims,
    read_stack_info,
    stack_info,
    stack_processes,
    write_stack_info,
)
from services.triton.model_config import parse
from services.triton.server import TritonPorts
from tests.support.models import UNIT_MAX_LENGTH, unit_model_dir


@pytest.fixture(autouse=True)
def memory_fs(tmp_path, monkeypatch) -> Path:
    """The HTTP services' metrics directories made in the test's own stand-in for /dev/shm, not the machine's."""
    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setattr(metrics_dir, "SHARED_MEMORY", shm)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    return shm


@pytest.fixture
def options(tmp_path):
    return StackOptions(
        model_dir=unit_model_dir(tmp_path / "model"),
        run_dir=tmp_path / "run",
        port=9123,
        triton_ports=TritonPorts(9200, 9201, 9202),
        endpoints_file=tmp_path / "endpoints.json",
    )


def test_the_default_stack_is_the_gateway():
    assert StackOptions().stack == "clearml" and "clearml" in STACKS


def test_fastapi_is_one_gunicorn_service_with_its_settings(options):
    (spec,) = stack_processes(replace(options, stack="fastapi", workers=3))
    assert spec.name == "fastapi" and spec.ports == [9123]
    assert spec.argv[spec.argv.index("--workers") + 1] == "3"
    assert "services.fastapi_stack.app:create_app()" in spec.argv
    assert spec.env["SERVING_WORKERS"] == "3" and spec.env["SERVING_MODEL_DIR"].endswith("model")
    assert spec.ready_url == "http://127.0.0.1:9123/health/ready"


def test_clearml_runs_triton_with_the_encoder_alone_then_the_gateway_and_the_controller(options):
    triton, gateway, controller = stack_processes(options)
    assert "--load-model=encoder" in triton.argv and not any("ensemble" in a for a in triton.argv)
    assert (options.run_dir / "triton-repository" / "encoder" / "config.pbtxt").is_file()
    assert gateway.env["GATEWAY_TRITON_GRPC_URL"] == "127.0.0.1:9201"
    assert gateway.env["GATEWAY_ENDPOINTS_FILE"] == str(options.endpoints_path.resolve())
    assert "GATEWAY_BUCKETS" not in gateway.env, "ragged padding by default"
    state = f"sqlite:///{(options.run_dir / 'lifecycle' / 'state.db').resolve()}"
    assert gateway.env["SERVING_STATE_URL"] == controller.env["SERVING_STATE_URL"] == state, "the embedded store"
    assert controller.env["CONTROLLER_TRITON_HTTP_URL"] == "http://127.0.0.1:9200"
    assert controller.env["CONTROLLER_GATEWAY_URL"] == "http://127.0.0.1:9123"
    token = Path(gateway.env["GATEWAY_ADMIN_TOKEN_FILE"])
    assert token.stat().st_mode & 0o777 == 0o600 and len(token.read_text().strip()) >= 32
    again = stack_processes(options)[1].env["GATEWAY_ADMIN_TOKEN_FILE"]
    assert Path(again).read_text() == token.read_text(), "generated once, kept across restarts"


def test_the_controller_serves_its_metrics_on_a_port_the_stack_claims(options):
    """What Prometheus' `controller` job scrapes, whether or not the controller judges a fleet's drift."""
    moved = replace(options, controller_metrics_port=9300)
    specs = stack_processes(moved)
    controller = specs[-1]
    assert controller.env["CONTROLLER_METRICS_PORT"] == "9300" and controller.ports == [9300]
    assert controller.env["CONTROLLER_METRICS_HOST"] == "127.0.0.1"
    claims = {claim.port: claim.option for claim in port_claims(moved, specs)}
    assert claims[9300] == "--controller-metrics-port"


def test_a_grpc_port_given_to_serving_up_reaches_the_gateway_and_is_claimed(options):
    gateway = stack_processes(options)[1]
    assert "GATEWAY_GRPC_PORT" not in gateway.env and gateway.ports == [options.port]  # the gateway's own default
    moved = replace(options, grpc_port=9381)
    specs = stack_processes(moved)
    assert specs[1].env["GATEWAY_GRPC_PORT"] == "9381" and specs[1].ports == [options.port, 9381]
    assert {claim.port: claim.option for claim in port_claims(moved, specs)}[9381] == "--grpc-port"
    by_make = replace(moved, via_make=True)
    assert {claim.port: claim.option for claim in port_claims(by_make, specs)}[9381] == "GRPC_PORT"
    off = stack_processes(replace(options, grpc_port=0))[1]
    assert off.env["GATEWAY_GRPC_PORT"] == "0" and off.ports == [options.port]


def test_a_state_url_given_to_serving_up_reaches_the_gateway_and_the_controller(options):
    url = "postgresql+psycopg2://serving@127.0.0.5:5432/serving"
    _, gateway, controller = stack_processes(replace(options, state_url=url))
    assert gateway.env["SERVING_STATE_URL"] == controller.env["SERVING_STATE_URL"] == url


def test_bucket_padding_hands_the_gateway_its_buckets(options):
    _, gateway, _ = stack_processes(replace(options, padding="bucket"))
    assert json.loads(gateway.env["GATEWAY_BUCKETS"])[-1] == UNIT_MAX_LENGTH


def test_triton_stack_loads_the_whole_ensemble_and_tracing_follows_the_knob(options):
    traced = replace(options, stack="triton", otlp_endpoint="http://127.0.0.1:4318/x")
    (spec,) = stack_processes(traced)
    assert {"--load-model=tokenizer", "--load-model=encoder", "--load-model=ensemble"} <= set(spec.argv)
    assert "--trace-config=mode=opentelemetry" in spec.argv
    (untraced,) = stack_processes(replace(options, stack="triton"))
    assert not any(a.startswith("--trace-config") for a in untraced.argv)


def test_an_unknown_stack_names_the_choices(options):
    with pytest.raises(ConfigurationError, match="fastapi, triton, clearml"):
        stack_processes(replace(options, stack="kserve"))


def test_tritons_ports_bind_to_loopback_unless_told_otherwise(options):
    triton, *_ = stack_processes(options)
    assert {"--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"} <= set(triton.argv)
    public = replace(options, triton_ports=TritonPorts(9200, 9201, 9202, "0.0.0.0"))
    assert "--grpc-address=0.0.0.0" in stack_processes(public)[0].argv


def test_the_stack_description_is_written_into_the_run_directory_and_read_back(options):
    assert read_stack_info(options.run_dir) == {}, "no stack has written one yet"
    options.run_dir.mkdir()
    write_stack_info(replace(options, stack="triton"))
    info = read_stack_info(options.run_dir)
    assert info["stack"] == "triton" and info["urls"]["infer"] == "http://127.0.0.1:9200/v2/models/ensemble/infer"
    assert info["urls"]["triton_metrics"] == "http://127.0.0.1:9202/metrics" and "serve" not in info["urls"]
    write_stack_info(options)
    assert read_stack_info(options.run_dir)["urls"]["controller_metrics"] == "http://127.0.0.1:9108/metrics"
    assert read_stack_info(options.run_dir)["urls"]["grpc"] == "127.0.0.1:8081"  # the gateway's default
    write_stack_info(replace(options, grpc_port=0))
    assert "grpc" not in read_stack_info(options.run_dir)["urls"]


def test_tuning_reaches_only_the_process_it_belongs_to(options):
    tuned = replace(options, stack="fastapi", tuning=Tuning(intra_op_threads=2, coalesce_depth=3, spin=True))
    (fastapi,) = stack_processes(tuned)
    assert fastapi.env["SERVING_INTRA_OP_THREADS"] == "2" and "SERVING_COALESCE_DEPTH" not in fastapi.env
    triton, gateway, _ = stack_processes(replace(tuned, stack="clearml"))
    assert gateway.env["SERVING_COALESCE_DEPTH"] == "3" and "SERVING_INTRA_OP_THREADS" not in gateway.env
    config = parse((options.run_dir / "triton-repository" / "encoder" / "config.pbtxt").read_text())
    assert config.HasField("dynamic_batching") and config.dynamic_batching.max_queue_delay_microseconds == 0, (
        "batching with no Triton delay behind the gateway"
    )


def test_tritons_liveness_is_an_inference_on_what_the_stack_serves(options):
    triton, gateway, controller = stack_processes(options)
    assert triton.liveness.model == "encoder" and triton.liveness.url == "http://127.0.0.1:9200"
    assert gateway.liveness is None and controller.liveness is None, "watched for their exit (gunicorn minds workers)"
    (ensemble,) = stack_processes(replace(options, stack="triton"))
    assert ensemble.liveness.model == "ensemble", "it runs the tokenizer and the encoder"


def test_with_json_logs_the_recorded_process_becomes_tritonserver_itself(options):
    triton, *_ = stack_processes(replace(options, log_json=True))
    assert triton.argv[1:4] == ["-m", "services.triton.logpipe", "--"] and triton.argv[4].endswith("tritonserver")


def test_a_restarted_http_service_gets_a_fresh_metrics_directory(options):
    _, gateway, _ = stack_processes(options)
    gateway.prepare()
    left = Path(gateway.env["PROMETHEUS_MULTIPROC_DIR"]) / "counter_12345.db"
    left.write_bytes(b"a dead worker's counts")
    gateway.prepare()
    assert not left.exists() and left.parent.is_dir()


def test_the_metrics_directory_is_in_memory_linked_from_the_run_directory_and_removed_at_the_stop(options, memory_fs):
    _, gateway, _ = stack_processes(options)
    link = Path(gateway.env["PROMETHEUS_MULTIPROC_DIR"])
    assert link == options.run_dir.resolve() / "prometheus-gateway" and list(memory_fs.iterdir()) == []
    gateway.prepare()
    made = link.resolve()
    assert made.parent == memory_fs and made.stat().st_mode & 0o777 == 0o700
    (made / "counter_1.db").write_bytes(b"a dead worker's counts")
    gateway.prepare()
    assert link.resolve() == made and [p.name for p in made.iterdir()] == [".link"], "a restart empties it in place"
    gateway.cleanup()
    assert not link.exists() and list(memory_fs.iterdir()) == []


def test_a_link_to_anything_but_this_links_own_metrics_directory_is_dropped_and_its_target_kept(tmp_path, memory_fs):
    """A directory elsewhere, one on the memory filesystem not named as ours, and another run directory's (this one a
    copy of it, `cp -a`): each kept, only the link goes."""
    original = metrics_dir.metrics_link(tmp_path / "original", "gateway")
    theirs = metrics_dir.renew(original)
    elsewhere, lookalike = tmp_path / "precious", memory_fs / "precious"
    for target in (elsewhere, lookalike, theirs):
        target.mkdir(exist_ok=True)
        (target / "file").write_text("kept")
        link = tmp_path / "copy" / "prometheus-gateway"
        link.parent.mkdir(exist_ok=True)
        link.symlink_to(target)
        assert metrics_dir.renew(link) not in (elsewhere, lookalike, theirs)
        metrics_dir.remove_metrics_dir(link)
        assert not link.is_symlink() and (target / "file").read_text() == "kept"
    assert original.resolve() == theirs


def test_without_a_writable_memory_filesystem_the_directory_is_in_the_run_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(metrics_dir, "SHARED_MEMORY", tmp_path / "no-shm")
    made = metrics_dir.renew(metrics_dir.metrics_link(tmp_path / "run", "api"))
    assert made == tmp_path / "run" / "prometheus-api" and made.is_dir() and not made.is_symlink()


def test_the_options_survive_the_trip_to_the_detached_supervisor(options):
    tuned = replace(options, tuning=Tuning(preferred_batch_sizes=(4, 8), spin=True), traces=True, endpoint="e")
    assert StackOptions.from_json(tuned.to_json()) == tuned


def test_clearml_makes_the_run_and_lifecycle_directories_and_the_secrets_private(options):
    """What an older run (or a umask of 022) left readable by others is narrowed before anything starts."""
    lifecycle = options.run_dir / "lifecycle"
    lifecycle.mkdir(parents=True, mode=0o755)
    for path, mode in [(options.run_dir, 0o755), (lifecycle, 0o755)]:
        path.chmod(mode)
    for name in ("admin-token", "lifecycle/state.db"):
        (options.run_dir / name).write_text("kept\n")
        (options.run_dir / name).chmod(0o644)
    _, gateway, _ = stack_processes(options)
    assert Path(gateway.env["GATEWAY_ADMIN_TOKEN_FILE"]).read_text() == "kept\n"
    modes = {
        p: (options.run_dir / p).stat().st_mode & 0o777 for p in (".", "lifecycle", "admin-token", "lifecycle/state.db")
    }
    assert modes == {".": 0o700, "lifecycle": 0o700, "admin-token": 0o600, "lifecycle/state.db": 0o600}


@pytest.mark.parametrize("content", ["", " \n\n"])
def test_an_empty_admin_token_file_stops_serving_up_with_the_fix(options, content):
    options.run_dir.mkdir(parents=True)
    (options.run_dir / "admin-token").write_text(content)
    with pytest.raises(ConfigurationError, match="is empty: delete it and `serving up` writes a new one"):
        stack_processes(options)


def test_the_simulated_device_goes_where_each_stack_runs_its_model(options):
    sim = replace(options, device="sim", sim_fixed_us=500.0, sim_per_token_us=3.0)
    lock = str((sim.run_dir / "sim-device.lock").resolve())
    (fastapi,) = stack_processes(replace(sim, stack="fastapi", workers=2))
    assert fastapi.env["SERVING_DEVICE"] == "sim" and fastapi.env["SERVING_SIM_LOCK_FILE"] == lock
    assert float(fastapi.env["SERVING_SIM_FIXED_US"]) == 500 and float(fastapi.env["SERVING_SIM_PER_TOKEN_US"]) == 3
    for stack in ("triton", "clearml"):
        processes = stack_processes(replace(sim, stack=stack))
        encoder = parse((sim.run_dir / "triton-repository" / "encoder" / "config.pbtxt").read_text())
        params = {key: value.string_value for key, value in encoder.parameters.items()}
        assert params["device"] == "sim" and params["sim_lock_file"] == lock and float(params["sim_fixed_us"]) == 500
        assert not any(k.endswith("DEVICE") for p in processes for k in p.env), "the gateway learns it from Triton"
    assert "SERVING_DEVICE" not in stack_processes(replace(options, stack="fastapi"))[0].env
    write_stack_info(replace(sim, stack="fastapi"))
    info = read_stack_info(sim.run_dir)
    assert info["device"] == "sim" and info["sim"] == {"fixed_us": 500.0, "per_token_us": 3.0}


def test_tuning_is_typed_refuses_an_unknown_knob_and_survives_the_supervisors_json(options):
    tuned = replace(options, tuning=Tuning.of({"preferred_batch_sizes": [4, 8], "coalesce_depth": 2}))
    assert tuned.tuning.preferred_batch_sizes == (4, 8) and tuned.tuning.given() == {
        "preferred_batch_sizes": (4, 8),
        "coalesce_depth": 2,
    }
    assert StackOptions.from_json(tuned.to_json()) == tuned
    with pytest.raises(ValueError, match="unknown tuning knob 'workers'; known: coalesce_depth, encoder_instances"):
        Tuning.of({"workers": 2})


def test_a_stale_gateway_name_stops_serving_up_before_any_process_starts(options, monkeypatch):
    monkeypatch.setenv("GATEWAY_MAX_INFLIGHT", "2")
    with pytest.raises(ConfigurationError, match="every HTTP stack reads SERVING_MAX_INFLIGHT"):
        stack_processes(options)
    monkeypatch.delenv("GATEWAY_MAX_INFLIGHT")
    assert [spec.name for spec in stack_processes(options)] == ["triton", "gateway", "controller"]


def test_the_users_runtime_directory_is_used_only_where_it_is_in_memory(tmp_path, monkeypatch, memory_fs):
    """Some containers set XDG_RUNTIME_DIR to a directory on disk: there a full disk would kill the workers again."""
    on_disk = tmp_path / "runtime"
    on_disk.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(on_disk))
    assert metrics_dir.memory_fs() == memory_fs
    in_memory = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(in_memory))
        assert metrics_dir.filesystem(in_memory) == "tmpfs" and metrics_dir.memory_fs() == in_memory
    finally:
        in_memory.rmdir()


def test_the_endpoint_file_is_the_run_directorys_unless_given(tmp_path):
    """Two runs with different run directories share no endpoint file; the options survive the detached hand-over."""
    first, second = StackOptions(run_dir=tmp_path / "a"), StackOptions(run_dir=tmp_path / "b")
    assert first.endpoints_path == tmp_path / "a" / "endpoints.json"
    assert second.endpoints_path == tmp_path / "b" / "endpoints.json"
    assert replace(first, run_dir=tmp_path / "c").endpoints_path == tmp_path / "c" / "endpoints.json"
    given = StackOptions(run_dir=tmp_path / "a", endpoints_file=Path("elsewhere.json"))
    assert given.endpoints_path == Path("elsewhere.json")
    assert StackOptions.from_json(first.to_json()) == first


def test_a_traced_stack_names_its_own_receiver(options):
    traced = replace(options, stack="clearml", traces=True, trace_port=9400)
    assert stack_info(traced)["urls"]["traces"] == "http://127.0.0.1:9400/v1/traces"
    assert "traces" not in stack_info(options)["urls"]
    assert "traces" not in stack_info(replace(traced, otlp_endpoint="http://collector:4318/v1/traces"))["urls"]


def test_started_by_make_a_busy_triton_or_trace_port_names_makes_knob(options):
    traced = replace(options, traces=True, via_make=True)
    claims = {claim.port: claim.option for claim in port_claims(traced, stack_processes(traced))}
    http, grpc, metrics = traced.triton_ports.http, traced.triton_ports.grpc, traced.triton_ports.metrics
    assert (claims[http], claims[grpc], claims[metrics]) == (
        "TRITON_HTTP_PORT",
        "TRITON_GRPC_PORT",
        "TRITON_METRICS_PORT",
    )
    assert claims[traced.trace_port] == "TRACE_PORT"
    direct = replace(traced, via_make=False)
    claims = {claim.port: claim.option for claim in port_claims(direct, stack_processes(direct))}
    assert (claims[http], claims[traced.trace_port]) == ("--triton-http-port", "--trace-port")

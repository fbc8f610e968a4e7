"""The `serving` commands that read the run directory: they take it from SERVING_RUN_DIR when they run (not when
the CLI is imported) and end a user's mistake in one line with exit code 2."""

import json
import re
import sys

import pytest
from typer.testing import CliRunner

from services.cli import app
from services.launcher import free_port
from services.stacks import StackOptions, write_stack_info
from tests.support.models import unit_model_dir
from tests.support.tables import read_table


def serving(run_dir, *args, **env):
    return CliRunner().invoke(app, list(args), env={"SERVING_RUN_DIR": str(run_dir), **env})


def test_help_lists_every_command_group():
    output = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    for command in ("model-repo", "up", "observability", "down", "status", "logs", "analyze", "model", "endpoints"):
        assert f" {command} " in output


def test_status_and_down_of_an_empty_run_directory(tmp_path):
    status = serving(tmp_path, "status", "--json")
    assert status.exit_code == 0 and json.loads(status.stdout) == {"processes": []}
    assert "nothing is running" in serving(tmp_path, "status").stdout
    down = serving(tmp_path, "down")
    assert down.exit_code == 0 and "nothing was running" in down.output


def test_status_shows_the_recorded_processes_and_the_stack_they_make_up(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "gateway.pid").write_text("999999999")  # above any pid: its process group does not exist
    options = StackOptions(model_dir=unit_model_dir(tmp_path / "model"), run_dir=run_dir, port=free_port())
    write_stack_info(options)
    report = json.loads(serving(run_dir, "status", "--json").stdout)
    assert [(p["name"], p["state"]) for p in report["processes"]] == [("gateway", "dead")]
    assert report["stack"] == "clearml" and report["ready"] is False, "nothing answers on the API's port"
    table = serving(run_dir, "status").stdout
    assert "gateway" in table and "dead" in table and f"http://127.0.0.1:{options.port}/serve/" in table


def test_status_shows_only_the_knobs_of_its_stack_and_whole_paths(tmp_path):
    run_dir = tmp_path / ("a-run-directory-whose-path-is-longer-than-a-terminal-is-wide-" * 2)
    run_dir.mkdir()
    (run_dir / "fastapi.pid").write_text("999999999")
    log = str(run_dir / "logs" / "fastapi.log")
    (run_dir / "fastapi.json").write_text(json.dumps({"name": "fastapi", "pid": 999999999, "log": log}))
    options = StackOptions(model_dir=unit_model_dir(tmp_path / "model"), run_dir=run_dir, stack="fastapi")
    write_stack_info(options)
    report = json.loads(serving(run_dir, "status", "--json").stdout)
    assert report["processes"][0]["log"] == log and "batching" not in report
    table = serving(run_dir, "status", COLUMNS="80").stdout  # a terminal 80 columns wide
    assert "STACK=fastapi WORKERS=" in table and "BATCHING" not in table, "Triton's batching is no FastAPI knob"
    assert "…" not in table and str(options.model_dir.resolve()) in table
    (row,) = read_table(table, ["process", "pid", "state", "ready", "restarts", "uptime", "ports", "log"])
    assert "".join(row["log"]) == log, "the log path folds over lines of its cell, whole"
    assert log in serving(run_dir, "status", "--wide", COLUMNS="80").stdout, "--wide: on one line"
    # no terminal and no COLUMNS (`make status | less`, a CI log): one line, not a path folded over 4 (issue 42)
    piped = serving(run_dir, "status", COLUMNS=None).stdout
    assert len([line for line in piped.splitlines() if "fastapi" in line and log in line]) == 1, piped


def test_logs_without_a_log_directory_says_how_to_get_one(tmp_path):
    result = serving(tmp_path, "logs")
    assert result.exit_code == 2 and f"no logs in {tmp_path / 'logs'}" in result.output


def test_logs_says_when_an_id_it_cannot_find_may_have_been_sampled_out(tmp_path):
    (tmp_path / "logs").mkdir()
    started = {"msg": "completion lines", "completion_log_sample": 0.1, "request_id": "-"}
    (tmp_path / "logs" / "api.log").write_text(json.dumps(started) + "\n")
    result = serving(tmp_path, "logs", "--request-id", "abc-1")
    assert result.exit_code == 1 and "no log line has request id abc-1" in result.output
    assert "only 0.1 of them" in result.output and "sampling" in result.output


def test_logs_reads_the_rotated_files_too_in_time_order(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    line = '{{"ts": "2026-12-03T10:00:0{second}.000Z", "msg": "{msg}", "request_id": "{rid}"}}\n'
    (logs / "api.log.2").write_text(line.format(second=1, msg="oldest", rid="r-1"))
    (logs / "api.log.1").write_text(line.format(second=2, msg="older", rid="r-2"))
    (logs / "api.log").write_text(line.format(second=3, msg="newest", rid="r-1"))
    (logs / "controller.log").write_text(line.format(second=0, msg="first of all", rid="-"))
    shown = serving(tmp_path, "logs", "--json").output.splitlines()
    assert [json.loads(entry)["msg"] for entry in shown] == ["first of all", "oldest", "older", "newest"]
    assert {json.loads(entry)["service"] for entry in shown} == {"api", "controller"}, "a rotated file's service"
    found = serving(tmp_path, "logs", "--request-id", "r-1", "--json").output.splitlines()
    assert [json.loads(entry)["msg"] for entry in found] == ["oldest", "newest"]


def test_up_refuses_a_batching_that_is_neither_on_nor_off(tmp_path):
    result = serving(tmp_path, "up", "--batching", "maybe")
    assert result.exit_code == 2 and "BATCHING must be on or off, not 'maybe'" in result.output
    assert not list(tmp_path.iterdir()), "nothing started, nothing written"


def test_a_detached_stack_that_cannot_start_says_why_and_leaves_nothing_recorded(tmp_path):
    import socket

    run_dir = tmp_path / "run"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        model = str(unit_model_dir(tmp_path / "model"))
        result = serving(run_dir, "up", "--detach", "--model-dir", model, "--triton-http-port", str(port))
    assert result.exit_code == 2, result.output
    assert f"port {port} (triton, --triton-http-port) is in use" in result.output
    assert not list(run_dir.glob("*.pid")), "no background supervisor was started"
    assert not (run_dir / "logs" / "supervisor.log").exists(), "the ports were checked before it"


def test_every_taken_port_is_named_at_once_before_anything_starts(tmp_path):
    """The API's port and Triton's gRPC port taken: one error names both, the process that would bind each, the
    option that moves it with a free port to give it, and who holds it; nothing starts (Triton used to start first,
    and the stack failed only when the gateway could not bind, 15 s later)."""
    import os
    import socket
    import time

    run_dir = tmp_path / "run"
    with socket.socket() as api, socket.socket() as grpc:
        for busy in (api, grpc):
            busy.bind(("127.0.0.1", 0))
            busy.listen()
        api_port, grpc_port = api.getsockname()[1], grpc.getsockname()[1]
        model = str(unit_model_dir(tmp_path / "model"))
        free = [str(free_port()) for _ in range(2)]
        started = time.monotonic()
        result = serving(
            run_dir, "up", "--model-dir", model, "--port", str(api_port), "--triton-grpc-port", str(grpc_port),
            "--triton-http-port", free[0], "--triton-metrics-port", free[1],
        )  # fmt: skip
        took = time.monotonic() - started
    assert result.exit_code == 2, result.output
    holder = f"in use by pid {os.getpid()} "
    assert f"port {api_port} (gateway, --port) is {holder}" in result.output
    assert f"port {grpc_port} (triton, --triton-grpc-port) is {holder}" in result.output
    assert "Nothing was started" in result.output and "--port " in result.output.split("e.g.")[1]
    assert "ready" not in result.output and not list(run_dir.glob("*.pid")), "no process was started"
    assert took < 10, f"refused after {took:.1f} s"


def test_a_make_up_user_is_told_make_s_knob_and_a_serving_up_user_the_option(tmp_path):
    """`make up` sets SERVING_VIA_MAKE: its user gets `PORT=...`, which `make up` takes (issue 42: `--port 8081`)."""
    import socket

    model = str(unit_model_dir(tmp_path / "model"))
    with socket.socket() as api:
        api.bind(("127.0.0.1", 0))
        api.listen()
        port = str(api.getsockname()[1])
        args = ["up", "--model-dir", model, "--port", port, "--stack", "fastapi"]
        env = {"SERVING_RUN_DIR": str(tmp_path / "run")}
        via_make = CliRunner().invoke(app, args, env=env | {"SERVING_VIA_MAKE": "1"})
        direct = CliRunner().invoke(app, args, env=env)
    assert via_make.exit_code == direct.exit_code == 2
    assert f"port {port} (fastapi, PORT) is in use" in via_make.output
    assert re.search(r"e\.g\. PORT=\d+", via_make.output) and "--port" not in via_make.output
    assert re.search(r"e\.g\. --port \d+", direct.output)


def test_a_second_detached_stack_in_the_same_run_directory_is_refused(tmp_path):
    import os

    from services.launcher.records import write_meta

    write_meta(tmp_path, {"name": "supervisor", "pid": os.getpid()})  # a live supervisor
    result = serving(tmp_path, "up", "--detach", "--model-dir", str(unit_model_dir(tmp_path / "model")))
    assert result.exit_code == 2 and "a stack is already up" in result.output


@pytest.mark.parametrize("debug", [True, False])
def test_debug_shows_the_traceback_of_an_error_the_command_reports(tmp_path, monkeypatch, capsys, debug):
    """`serving up --stack tensorflow`: one line and exit code 2; with --debug anywhere, the traceback first."""
    from services.common import cli

    monkeypatch.setenv("SERVING_RUN_DIR", str(tmp_path))
    monkeypatch.setattr(cli._Flags, "debug", False)
    monkeypatch.setattr(sys, "argv", ["serving", "up", "--stack", "tensorflow", *(["--debug"] if debug else [])])
    with pytest.raises(SystemExit) as ended:
        cli.run(app)
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "error: unknown STACK 'tensorflow'; choose one of fastapi, triton, clearml"
    assert ("Traceback (most recent call last)" in err) is debug
    assert ("in stack_processes" in err) is debug, "the traceback reaches where the error was raised"

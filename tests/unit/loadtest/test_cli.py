"""The `loadtest` command line without a stack: its commands, its usage errors, and the run log that lands beside
the running stack's logs only when there is one."""

import logging
from http.server import BaseHTTPRequestHandler

import pytest
import typer
from typer.testing import CliRunner

from loadtest.cli import app
from loadtest.cli.attack import run_log
from loadtest.cli.options import labels
from loadtest.results import read_results
from tests.support.http_stub import send_json, serve


def test_every_command_is_listed():
    text = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "120"}).output
    for command in ("attack", "report", "matrix", "overload", "soak", "tune", "bench", "plot", "ab", "payloads"):
        assert f" {command} " in text


def test_labels_are_key_value_pairs():
    assert labels(["stack=clearml", "note=a=b"]) == {"stack": "clearml", "note": "a=b"}
    with pytest.raises(typer.BadParameter, match="key=value"):
        labels(["stack"])


def test_an_unknown_engine_is_refused_before_the_attack():
    result = CliRunner().invoke(app, ["attack", "--engine", "wrk", "--url", "http://127.0.0.1:9"])
    assert result.exit_code == 2 and "--engine must be builtin, ab or vegeta" in result.output


def test_a_grpc_attack_is_refused_where_it_cannot_go(tmp_path):
    run = CliRunner(env={"COLUMNS": "200", "SERVING_RUN_DIR": str(tmp_path)}).invoke
    http_url = run(app, ["attack", "--format", "grpc", "--url", "http://127.0.0.1:9"])
    assert http_url.exit_code == 2 and "grpc://HOST:PORT" in http_url.output
    traced = run(app, ["attack", "--format", "grpc", "--url", "grpc://127.0.0.1:9", "--trace-ratio", "0.1"])
    assert traced.exit_code == 2 and "drop --trace-ratio" in traced.output
    ab = run(app, ["attack", "--format", "grpc", "--url", "grpc://127.0.0.1:9", "--engine", "ab", "--requests", "1"])
    assert ab.exit_code != 0 and "--engine ab speaks HTTP only" in str(ab.output) + str(ab.exception)


@pytest.fixture
def loadtest_logger():
    log = logging.getLogger("loadtest")
    yield log
    for handler in list(log.handlers):
        handler.close()
        log.removeHandler(handler)
    log.propagate = True


def test_the_run_log_goes_beside_the_stack_s_logs_only(tmp_path, loadtest_logger):
    assert not run_log(tmp_path).handlers, "no stack has written logs there"
    (tmp_path / "logs").mkdir()
    run_log(tmp_path).info("attack ended")
    assert "attack ended" in (tmp_path / "logs" / "loadtest.log").read_text()


def test_payloads_lists_each_mix_as_a_table_and_as_json(tmp_path):
    import json

    from tests.support.models import unit_model_dir
    from tests.support.tables import read_table

    tokenizer = str(unit_model_dir(tmp_path / "model") / "tokenizer.json")
    as_json = json.loads(CliRunner().invoke(app, ["payloads", "--tokenizer", tokenizer, "--json"]).stdout)
    assert set(as_json) == {"short", "mixed", "long"} and all(sum(h.values()) == 500 for h in as_json.values())
    shown = CliRunner().invoke(app, ["payloads", "--tokenizer", tokenizer], env={"COLUMNS": "80"}).output
    rows = read_table(shown, ["tokens", "short", "mixed", "long"])
    assert [row["tokens"][0] for row in rows] == list(as_json["short"])


class Ok(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        send_json(self, 200, {"ok": True})

    def log_message(self, *args):
        return None


@pytest.fixture
def ok_server():
    yield from serve(Ok)


def test_an_attack_s_results_land_under_the_run_directory_and_report_reads_the_latest(
    tmp_path, monkeypatch, ok_server, loadtest_logger
):
    """Not in the current directory (issue 42: the docs' `--output run.jsonl` landed in the repository root)."""
    run_dir, elsewhere = tmp_path / "run-a", tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    env = {"SERVING_RUN_DIR": str(run_dir)}
    attack = ["attack", "--url", ok_server, "--requests", "5", "--concurrency", "1", "--report", "none"]
    first = CliRunner().invoke(app, attack, env=env)
    second = CliRunner().invoke(app, attack, env=env)
    assert first.exit_code == second.exit_code == 0, first.output + second.output
    written = sorted((run_dir / "results").iterdir())
    assert len(written) == 2 and all(len(read_results(path)) == 5 for path in written), "one file per attack"
    assert not list(elsewhere.iterdir())
    latest = max(written, key=lambda path: path.stat().st_mtime_ns)
    assert f"results: {latest}" in second.output
    report = CliRunner().invoke(app, ["report", "--type", "json"], env=env)
    assert report.exit_code == 0 and f"report over {latest}" in report.output
    chosen = tmp_path / "chosen.jsonl"
    assert CliRunner().invoke(app, [*attack, "--output", str(chosen)], env=env).exit_code == 0
    assert len(read_results(chosen)) == 5 and len(list((run_dir / "results").iterdir())) == 2


def test_report_without_results_says_how_to_get_them(tmp_path):
    result = CliRunner().invoke(app, ["report"], env={"SERVING_RUN_DIR": str(tmp_path)})
    assert result.exit_code == 2 and "run `loadtest attack`" in result.output

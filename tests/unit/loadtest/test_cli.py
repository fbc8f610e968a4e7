"""The `loadtest` command line without a stack: its commands, its usage errors, and the run log that lands beside
the running stack's logs only when there is one."""

import logging

import pytest
import typer
from typer.testing import CliRunner

from loadtest.cli import app
from loadtest.cli.attack import run_log
from loadtest.cli.options import labels


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

"""`serving endpoints` and `serving metrics`: what they write, what they refuse (bad names with the rule), and no
change lost when several run at once."""

import json
import threading
import time

import pytest
from typer.testing import CliRunner

from services.cli import app
from services.common.names import NAME_PATTERN
from services.gateway.endpoint_commands import add_endpoint
from services.gateway.endpoints import EndpointConfig, EndpointsFile
from services.launcher import free_port
from tests.support.tables import read_table


@pytest.fixture(autouse=True)
def no_triton(monkeypatch):
    """The Triton check looks at GATEWAY_TRITON_GRPC_URL: a closed port here, whatever runs on this machine
    (tests/integration/gateway/test_endpoint_checks.py checks against a real Triton)."""
    monkeypatch.setenv("GATEWAY_TRITON_GRPC_URL", f"127.0.0.1:{free_port()}")


def test_endpoints_add_list_remove(tmp_path):
    runner = CliRunner()
    path = tmp_path / "endpoints.json"
    added = runner.invoke(
        app,
        [
            "endpoints",
            "add",
            "sst2",
            "--model",
            "encoder",
            "--version",
            "2",
            "--input",
            "input_ids:int64:-1,-1",
            "--output",
            "logits:FP32:-1,2",
            "--file",
            str(path),
        ],
    )
    assert added.exit_code == 0, added.output
    config = EndpointsFile.read(path).endpoints["sst2"]
    assert (config.engine, config.model, config.version) == ("triton", "encoder", "2")
    assert config.inputs[0].dtype == "INT64" and config.inputs[0].shape == [-1, -1]
    assert "sst2" in runner.invoke(app, ["endpoints", "list", "--file", str(path)]).output
    listed = json.loads(runner.invoke(app, ["endpoints", "list", "--json", "--file", str(path)]).stdout)
    assert listed["sst2"]["model"] == "encoder" and listed["sst2"]["outputs"][0]["shape"] == [-1, 2]
    assert runner.invoke(app, ["endpoints", "remove", "sst2", "--file", str(path)]).exit_code == 0
    assert EndpointsFile.read(path).endpoints == {}
    missing = runner.invoke(app, ["endpoints", "remove", "sst2", "--file", str(path)])
    assert missing.exit_code == 2 and "no endpoint 'sst2'" in missing.output


def test_a_malformed_tensor_spec_says_what_is_expected(tmp_path):
    result = CliRunner().invoke(
        app, ["endpoints", "add", "x", "--input", "input_ids", "--file", str(tmp_path / "e.json")]
    )
    assert result.exit_code != 0 and "NAME:DTYPE:SHAPE" in result.output


def test_an_invalid_endpoint_is_refused_with_the_field_and_the_fix_and_nothing_is_written(tmp_path):
    path = tmp_path / "endpoints.json"
    refused = CliRunner().invoke(
        app, ["endpoints", "add", "ort", "--engine", "onnxruntime", "--model", "build/model", "--file", str(path)]
    )
    assert refused.exit_code == 2
    assert "field 'outputs' is empty" in refused.output and "--output NAME:DTYPE:SHAPE" in refused.output
    assert not path.exists()


def test_a_hand_corrupted_entry_blocks_new_ones_until_removed(tmp_path):
    path = tmp_path / "endpoints.json"
    path.write_text('{"endpoints": {"bad": {"engine": "tensorflow"}}}')
    blocked = CliRunner().invoke(
        app, ["endpoints", "add", "x", "--model", "m", "--output", "o:FP32:-1,2", "--file", str(path)]
    )
    assert blocked.exit_code == 2 and "bad:" in blocked.output and "fix or remove the other entries" in blocked.output
    assert CliRunner().invoke(app, ["endpoints", "remove", "bad", "--file", str(path)]).exit_code == 0
    added = CliRunner().invoke(
        app, ["endpoints", "add", "x", "--model", "m", "--output", "o:FP32:-1,2", "--file", str(path)]
    )
    assert added.exit_code == 0, added.output


@pytest.mark.parametrize("name", ["..", "../x", "a\nb", "My-Endpoint", "x" * 64])
def test_a_bad_endpoint_name_is_refused_with_the_rule_and_nothing_is_written(tmp_path, name):
    path = tmp_path / "endpoints.json"
    for command in (
        ["endpoints", "add", name, "--model", "m", "--output", "o:FP32:-1,2"],
        ["metrics", "add", name, "--variable-value", "x"],
    ):
        refused = CliRunner().invoke(app, [*command, "--file", str(path)])
        assert refused.exit_code == 2 and NAME_PATTERN in refused.output.replace("\n", ""), refused.output
    assert not path.exists()


def test_a_bad_triton_model_name_is_refused(tmp_path):
    path = tmp_path / "endpoints.json"
    refused = CliRunner().invoke(
        app, ["endpoints", "add", "x", "--model", "../m", "--output", "o:FP32:-1,2", "--file", str(path)]
    )
    assert refused.exit_code == 2 and "Triton model name" in refused.output and not path.exists()


def test_an_entry_with_a_bad_name_can_be_removed(tmp_path):
    path = tmp_path / "endpoints.json"
    path.write_text(json.dumps({"endpoints": {"../x": {"engine": "custom"}}, "metrics": {"a b": {}}}))
    assert CliRunner().invoke(app, ["endpoints", "remove", "../x", "--file", str(path)]).exit_code == 0
    assert CliRunner().invoke(app, ["metrics", "remove", "a b", "--file", str(path)]).exit_code == 0
    assert json.loads(path.read_text()) == {"endpoints": {}, "metrics": {}}


def test_metrics_add_and_remove_keep_the_other_entries(tmp_path):
    path = tmp_path / "endpoints.json"
    path.write_text('{"endpoints": {"typo": {"engine": "tensorflow"}}}')
    added = CliRunner().invoke(app, ["metrics", "add", "minilm", "--variable-scalar", "n=1,2,5", "--file", str(path)])
    assert added.exit_code == 0, added.output
    file = EndpointsFile.read(path)
    assert file.metrics["minilm"].variables["n"].buckets == [1, 2, 5] and "typo" in file.invalid
    refused = CliRunner().invoke(app, ["metrics", "add", "minilm", "--variable-scalar", "n=2,1", "--file", str(path)])
    assert refused.exit_code == 2 and "increasing buckets" in refused.output
    assert CliRunner().invoke(app, ["metrics", "remove", "minilm", "--file", str(path)]).exit_code == 0
    assert json.loads(path.read_text()) == {"endpoints": {"typo": {"engine": "tensorflow"}}, "metrics": {}}


WAITING = (
    "import pathlib, time\n\n\nclass Preprocess:\n    def load(self, f):\n"
    "        pathlib.Path({marker!r}).touch()\n"
    "        while not pathlib.Path({go!r}).exists():\n            time.sleep(0.01)\n\n"
    "    def process(self, d, s, c=None):\n        return d\n"
)


def test_two_adds_at_once_one_with_a_slow_load_both_land(tmp_path):
    """The slow add's load() lasts until the fast add is done. Before: each add read the file, validated and wrote
    its copy: the slow one's write replaced the file without the other's entry, and both said 'written'."""
    path, marker, go = tmp_path / "endpoints.json", tmp_path / "loading", tmp_path / "go"
    (tmp_path / "slow.py").write_text(WAITING.format(marker=str(marker), go=str(go)))
    (tmp_path / "fast.py").write_text("class Preprocess:\n    def process(self, d, s, c=None):\n        return d\n")
    slow = threading.Thread(
        target=add_endpoint, args=(path, "slow", EndpointConfig(engine="custom", preprocess="slow.py"))
    )
    slow.start()
    while not marker.exists():  # the slow add has read the file and is in the user's load()
        time.sleep(0.01)
    add_endpoint(path, "fast", EndpointConfig(engine="custom", preprocess="fast.py"))
    go.touch()
    slow.join(timeout=30)
    assert sorted(EndpointsFile.read(path).endpoints) == ["fast", "slow"]


def test_the_triton_check_goes_to_the_running_stacks_triton_unless_told_otherwise(tmp_path, monkeypatch):
    from services.gateway.endpoint_commands import triton_address

    monkeypatch.setenv("SERVING_RUN_DIR", str(tmp_path))
    monkeypatch.delenv("GATEWAY_TRITON_GRPC_URL", raising=False)
    assert triton_address(None) == "127.0.0.1:8001", "no stack: the default address"
    (tmp_path / "stack.json").write_text(json.dumps({"urls": {"triton_grpc": "127.0.0.1:18001"}}))
    assert triton_address(None) == "127.0.0.1:18001", "the stack `serving up` started, on its own ports"
    assert triton_address("10.0.0.7:8001") == "10.0.0.7:8001", "--triton-url first"
    monkeypatch.setenv("GATEWAY_TRITON_GRPC_URL", "127.0.0.9:8001")
    assert triton_address(None) == "127.0.0.9:8001", "then the gateway's own setting, when set"


def test_the_list_shows_names_and_paths_as_written(tmp_path):
    """At 80 columns: a name too long for its column is cut with an ellipsis on its one line (never broken over
    lines), a path folds whole over the lines of its cell, and `--json` has every name whole."""
    path = tmp_path / "endpoints.json"
    entry = {"engine": "custom", "preprocess": "pre[v2]:smile:.py"}
    name = "a-rather-long-endpoint-name-for-a-narrow-terminal"
    path.write_text(json.dumps({"endpoints": {name: entry}}))
    listed = CliRunner().invoke(app, ["endpoints", "list", "--file", str(path)], env={"COLUMNS": "80"})
    assert max(len(line) for line in listed.output.splitlines()) <= 80, listed.output
    headers = ["endpoint", "engine", "model", "model file", "version", "preprocess", "inputs", "outputs"]
    (row,) = read_table(listed.output, headers)
    (shown,) = row["endpoint"]
    assert shown.endswith("…") and name.startswith(shown[:-1]), listed.output
    assert "".join(row["preprocess"]) == "pre[v2]:smile:.py", listed.output  # no markup, no emoji
    as_json = CliRunner().invoke(app, ["endpoints", "list", "--json", "--file", str(path)])
    assert list(json.loads(as_json.stdout)) == [name]


def test_the_declared_variables_list_as_a_table_and_as_json(tmp_path):
    path = tmp_path / "endpoints.json"
    runner = CliRunner()
    added = ["metrics", "add", "minilm", "--variable-scalar", "tokens=1,2,4,8,16,32,64,128,256,512,1024,2048,4096"]
    assert (
        runner.invoke(app, [*added, "--variable-enum", "label=positive,negative", "--file", str(path)]).exit_code == 0
    )
    listed = runner.invoke(app, ["metrics", "list", "--file", str(path)], env={"COLUMNS": "80"}).output
    rows = read_table(listed, ["endpoint", "variable", "kind", "buckets / values", "log frequency"])
    assert [(row["variable"], row["kind"]) for row in rows] == [(["tokens"], ["scalar"]), (["label"], ["enum"])]
    assert " ".join(rows[0]["buckets / values"]).split(", ")[-1] == "4096", "the buckets wrap between values"
    as_json = json.loads(runner.invoke(app, ["metrics", "list", "--json", "--file", str(path)]).stdout)
    assert as_json["minilm"]["variables"]["label"] == {
        "kind": "enum",
        "buckets": [],
        "values": ["positive", "negative"],
    }


def test_two_run_directories_share_no_declarations(tmp_path, monkeypatch):
    """The default endpoint file is the run directory's: what one run declares, another run never sees, and nothing
    lands in the shell's directory."""
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    first = {"SERVING_RUN_DIR": str(tmp_path / "run-a")}
    second = {"SERVING_RUN_DIR": str(tmp_path / "run-b")}
    declared = runner.invoke(app, ["metrics", "add", "minilm", "--variable-scalar", "tokens=4,8"], env=first)
    assert declared.exit_code == 0, declared.output
    tensors = ["--input", "input_ids:int64:-1,-1", "--output", "logits:FP32:-1,2"]
    added = runner.invoke(app, ["endpoints", "add", "emb", "--model", "encoder", *tensors], env=first)
    assert added.exit_code == 0, added.output
    assert "tokens" in EndpointsFile.read(tmp_path / "run-a" / "endpoints.json").metrics["minilm"].variables
    listed = runner.invoke(app, ["metrics", "list", "--json"], env=second)
    assert listed.exit_code == 0 and json.loads(listed.output) == {}, listed.output
    listed = runner.invoke(app, ["endpoints", "list", "--json"], env=second)
    assert listed.exit_code == 0 and json.loads(listed.output) == {}, listed.output
    assert json.loads(runner.invoke(app, ["metrics", "list", "--json"], env=first).output)["minilm"]["variables"]
    assert not (tmp_path / "endpoints.json").exists(), "nothing in the shell's directory"


def test_an_explicit_file_and_model_file_mean_what_the_shell_means(tmp_path, monkeypatch):
    """`--file` is taken from the shell's directory; a relative `--model-file` found there (not beside the endpoint
    file) is kept as that file, one beside the endpoint file as written (the gateway takes it from there)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.bin").write_bytes(b"x")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "beside.bin").write_bytes(b"x")
    (tmp_path / "pre.py").write_text(
        "from pathlib import Path\n\n\nclass Preprocess:\n"
        "    def load(self, path):\n        assert Path(path).is_file(), path\n\n"
        "    def process(self, data, state, collect_custom_statistics_fn=None):\n        return data\n"
    )
    runner = CliRunner()
    for name, model_file in (("cwd", "models/m.bin"), ("beside", "beside.bin")):
        argv = ["endpoints", "add", name, "--engine", "custom", "--preprocess", "pre.py", "--model-file", model_file]
        argv += ["--file", "conf/e.json"]
        added = runner.invoke(app, argv, env={"SERVING_RUN_DIR": str(tmp_path / "run")})
        assert added.exit_code == 0, added.output
    endpoints = EndpointsFile.read(tmp_path / "conf" / "e.json").endpoints
    assert endpoints["cwd"].model_file == str(tmp_path / "models" / "m.bin")
    assert endpoints["beside"].model_file == "beside.bin"
    assert not (tmp_path / "run").exists(), "an explicit --file is the only file written"


def test_an_endpoint_file_left_in_the_shells_directory_is_named_once_not_read(tmp_path, monkeypatch):
    """Earlier versions kept ./endpoints.json: its endpoints are not lost without a word."""
    monkeypatch.chdir(tmp_path)
    EndpointsFile(endpoints={"old": EndpointConfig(engine="custom", preprocess="p.py")}).write(
        tmp_path / "endpoints.json"
    )
    env = {"SERVING_RUN_DIR": str(tmp_path / "run")}
    listed = CliRunner().invoke(app, ["endpoints", "list", "--json"], env=env)
    assert listed.exit_code == 0 and "note: ./endpoints.json is not read" in listed.output, listed.output
    assert f"mv endpoints.json {tmp_path / 'run' / 'endpoints.json'}" in listed.output
    (tmp_path / "run").mkdir()
    (tmp_path / "endpoints.json").rename(tmp_path / "run" / "endpoints.json")
    listed = CliRunner().invoke(app, ["endpoints", "list", "--json"], env=env)
    assert "note" not in listed.output and "old" in json.loads(listed.output), listed.output

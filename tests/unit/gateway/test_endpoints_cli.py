from typer.testing import CliRunner

from services.cli import app
from services.gateway.endpoints import EndpointsFile


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

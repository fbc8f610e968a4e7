"""clearml-serving's CLI forms beside this project's: several values after one flag, the tensor lists of
`serving endpoints add` (`--input-name a b --input-type int64 int64 --input-size "[-1, -1]" "[-1, -1]"`), dtypes by
Triton or numpy name, every engine offered, a missing library refused in one line."""

import dataclasses
import json
import re

import pytest
from typer.testing import CliRunner

from services.cli import app
from services.commands.multivalue import expand, is_option
from services.gateway import engines
from services.gateway.endpoints import EndpointsFile
from services.launcher import free_port


@pytest.fixture(autouse=True)
def no_triton(monkeypatch):
    """The Triton check looks at GATEWAY_TRITON_GRPC_URL: a closed port here, whatever runs on this machine."""
    monkeypatch.setenv("GATEWAY_TRITON_GRPC_URL", f"127.0.0.1:{free_port()}")


def add(path, *args: str):
    return CliRunner().invoke(app, ["endpoints", "add", *args, "--file", str(path)])


def command(*path: str):
    import typer.main

    found = typer.main.get_command(app)
    for name in path:
        found = found.commands[name]
    return found


@pytest.mark.parametrize(
    ("args", "expanded"),
    [
        (["--weights", "0.1", "0.9"], ["--weights", "0.1", "--weights", "0.9"]),
        (["--weights", "1", "--weights", "2"], ["--weights", "1", "--weights", "2"]),
        (["x", "--versions", "2", "1", "--url", "u"], ["x", "--versions", "2", "--versions", "1", "--url", "u"]),
        (["--weights=0.1", "0.9"], ["--weights=0.1", "0.9"]),  # `=` takes one value, as argparse does
        (["--weights", "1", "--", "2"], ["--weights", "1", "--", "2"]),
        (["--url", "a", "b"], ["--url", "a", "b"]),  # not a multi-value option: Click says "unexpected argument"
    ],
)
def test_a_multi_value_option_is_read_as_the_option_repeated(args, expanded):
    assert expand(command("model", "canary"), args) == expanded


def test_negative_numbers_and_json_are_values_options_are_not():
    assert not any(map(is_option, ["-1", "-0.5", "-.5", "-", "[-1, 384]", "x=-1"]))
    assert all(map(is_option, ["--input", "--input=a", "--", "-h"]))
    args = ["--input-size", "-1", "784", "--input-size", "[-1, -1]", "[-1, 384]", "--file", "f"]
    assert expand(command("endpoints", "add"), args) == [
        "--input-size",
        "-1",
        "--input-size",
        "784",
        "--input-size",
        "[-1, -1]",
        "--input-size",
        "[-1, 384]",
        "--file",
        "f",
    ]


def test_help_still_shows_each_option_once():
    shown = CliRunner().invoke(app, ["model", "canary", "--help"], terminal_width=200).output
    rows = [line.strip("│ *").split()[0] for line in shown.splitlines() if line.strip("│ *").startswith("--")]
    assert rows == ["--weights", "--versions", "--newest", "--url", "--token", "--help"]


LISTED = [
    "--input-name",
    *("input_ids", "attention_mask", "token_type_ids"),
    "--input-type",
    *("int64", "int64", "int64"),
    "--input-size",
    *("[-1, -1]", "[-1, -1]", "[-1, -1]"),
    "--output-name",
    "embedding",
    "--output-type",
    "float32",
    "--output-size",
    "[-1, 384]",
]
COLONS = [
    *("--input", "input_ids:INT64:-1,-1", "--input", "attention_mask:INT64:-1,-1"),
    *("--input", "token_type_ids:INT64:-1,-1", "--output", "embedding:FP32:-1,384"),
]


def test_both_tensor_forms_write_the_same_entry(tmp_path):
    path = tmp_path / "endpoints.json"
    for name, form in (("listed", LISTED), ("colons", COLONS)):
        result = add(path, name, "--model", "encoder", *form)
        assert result.exit_code == 0, result.output
        assert "not checked" in result.output  # Triton did not answer: said in one line, added anyway
    entries = json.loads(path.read_text())["endpoints"]
    assert entries["listed"] == entries["colons"]
    assert entries["listed"]["inputs"][1] == {"name": "attention_mask", "dtype": "INT64", "shape": [-1, -1]}
    assert entries["listed"]["outputs"] == [{"name": "embedding", "dtype": "FP32", "shape": [-1, 384]}]


def test_plain_numbers_are_one_tensors_shape_as_clearml_serving_reads_them(tmp_path):
    path = tmp_path / "endpoints.json"
    result = add(path, "k", "--model", "m", "--input-name", "x", "--input-type", "uint8", "--input-size", "-1", "784")
    assert result.exit_code == 2 and "field 'outputs' is empty" in result.output  # parsed, then checked
    result = add(path, "k", "--model", "m", "--input-name", "x", "--input-type", "uint8", "--input-size", "-1", "784",
                 "--output-name", "y", "--output-type", "float32", "--output-size", "[-1, 10]")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert EndpointsFile.read(path).endpoints["k"].inputs[0].model_dump() == {
        "name": "x",
        "dtype": "UINT8",
        "shape": [-1, 784],
    }


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--input-name", "a", "b", "c", "--input-type", "int64", "int64", "--input-size", "[1]", "[1]", "[1]"],
            "--input-name 3, --input-type 2, --input-size 3 values: give one name, one type and one size per input",
        ),
        (["--output-name", "a", "b"], "--output-name 2, --output-type 0, --output-size 0 values"),
        (["--input-name", "a", "--input-type", "int64", "--input-size", "x"], "e.g. \"[-1, -1]\", not 'x'"),
        (["--input-name", "a", "--input-type", "int64", "--input-size", "[1]", "2"], "not numbers and lists"),
        (["--input", "a:INT64:1", "--input-name", "b"], "with --input NAME:DTYPE:SHAPE or with --input-name"),
        (["--input", "input_ids"], "'input_ids' is not NAME:DTYPE:SHAPE"),
    ],
)
def test_tensor_lists_that_do_not_fit_are_refused_with_the_fix(tmp_path, args, says):
    result = add(tmp_path / "e.json", "x", "--model", "m", *args)
    assert result.exit_code == 2 and says in result.output.replace("\n", ""), result.output
    assert not (tmp_path / "e.json").exists()


def test_an_error_shows_what_was_typed_as_typed(tmp_path):
    result = add(tmp_path / "e.json", "x", "--model", "m", "--input", "a:smile:[b]FP32")
    assert "--input 'a:smile:[b]FP32' is not NAME:DTYPE:SHAPE" in " ".join(result.output.split()), result.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--input", "a:INT64:0,-5"], "axis sizes are 1 or more, or -1 for a dynamic axis; got 0 in [0, -5]"),
        (["--input", "a:INT64:-1,-5"], "got -5 in [-1, -5]"),
        (["--input", "a:INT64:" + ",".join(["1"] * 200)], "a shape has 1 to 32 axes, got 200"),
        (["--input", "a:INT64:-1", "--input", "a:INT64:-1"], "--input: input 'a' is declared twice: each input name"),
        (["--output", "o:FP32:-1", "--output", "o:FP32:-1"], "--output: output 'o' is declared twice"),
    ],
)
def test_shapes_and_names_triton_could_not_take_are_refused_before_anything_is_written(tmp_path, args, says):
    result = add(tmp_path / "e.json", "x", "--model", "m", *args)
    assert result.exit_code == 2 and says in " ".join(result.output.split()), result.output
    assert not (tmp_path / "e.json").exists()


ALLOWED = "use a Triton name (BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BYTES)"


@pytest.mark.parametrize(
    "args",
    [
        ["--input", "a:INT65:-1,-1", "--output", "o:FP32:-1"],
        ["--input-name", "a", "--input-type", "int65", "--input-size", "[-1, -1]", "--output", "o:FP32:-1"],
        ["--output", "o:float33:-1"],
    ],
)
def test_a_bad_dtype_is_refused_naming_the_allowed_ones(tmp_path, args):
    result = add(tmp_path / "e.json", "x", "--model", "m", *args)
    output = " ".join(result.output.split())
    assert result.exit_code == 2 and "is not a tensor type" in output and ALLOWED in output, result.output
    assert "or a numpy name (bool, uint8" in output and "KeyError" not in output


def test_a_bad_dtype_in_the_endpoint_file_is_that_entrys_error_with_the_allowed_ones(tmp_path):
    path = tmp_path / "endpoints.json"
    bad = {"engine": "triton", "model": "m", "outputs": [{"name": "o", "dtype": "INT65", "shape": [-1]}]}
    good = {"engine": "triton", "model": "m", "outputs": [{"name": "o", "dtype": "float32", "shape": [-1]}]}
    path.write_text(json.dumps({"endpoints": {"bad": bad, "good": good}}))
    read = EndpointsFile.read(path)
    assert read.endpoints["good"].outputs[0].dtype == "FP32"  # a numpy name is read as its Triton one
    assert read.invalid["bad"].startswith("field 'outputs.0.dtype': dtype 'INT65' is not a tensor type: " + ALLOWED)


def test_engine_help_lists_every_engine_with_its_summary(tmp_path):
    option = next(p for p in command("endpoints", "add").params if p.name == "engine")
    assert all(f"{name}: {engine.summary}" in option.help for name, engine in engines.ENGINES.items())
    for name in engines.NAMES:  # each one taken (then refused for what its entry lacks, not for its name)
        taken = add(tmp_path / "e.json", "x", "--engine", name)
        assert taken.exit_code == 2 and "is not one of" not in taken.output and "error:" in taken.output
    shown = re.sub(r"\s+", " ", CliRunner().invoke(app, ["endpoints", "add", "--help"]).output)
    assert all(name in shown for name in engines.NAMES)
    refused = add(tmp_path / "e.json", "x", "--engine", "tensorflow")
    assert refused.exit_code == 2 and "'tensorflow' is not one of" in refused.output


def test_an_engine_whose_library_is_missing_is_refused_in_one_line(tmp_path, monkeypatch):
    absent = dataclasses.replace(engines.ENGINES["xgboost"], module="no_such_library_for_this_test")
    monkeypatch.setitem(engines.ENGINES, "xgboost", absent)
    result = add(tmp_path / "e.json", "x", "--engine", "xgboost", "--model-file", "model.json")
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {engines.missing('xgboost')}"
    assert "pip install 'transformer-serving[xgboost]'" in result.output and not (tmp_path / "e.json").exists()


def test_metrics_options_take_several_values(tmp_path):
    path = tmp_path / "endpoints.json"
    added = CliRunner().invoke(
        app,
        ["metrics", "add", "minilm", "--variable-scalar", "a=1,2", "b=0,1", "--variable-value", "c", "d"]
        + ["--file", str(path)],
    )
    assert added.exit_code == 0, added.output
    assert sorted(EndpointsFile.read(path).metrics["minilm"].variables) == ["a", "b", "c", "d"]
    removed = CliRunner().invoke(app, ["metrics", "remove", "minilm", "--variable", "a", "c", "--file", str(path)])
    assert removed.exit_code == 0, removed.output
    assert sorted(EndpointsFile.read(path).metrics["minilm"].variables) == ["b", "d"]

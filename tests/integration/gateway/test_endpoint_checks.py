"""`serving endpoints add` checks a triton endpoint against the real Triton it will call (the module's Triton serving
the tiny model's `encoder`: max_batch_size 64, three INT64 inputs of dims [-1], an FP32 output `embedding` of dims
[32]): a wrong model, version, name, dtype or rank is refused with the fix, and nothing is written."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from services.cli import app
from services.launcher import free_port

INPUTS = ["input_ids", "attention_mask", "token_type_ids"]
GOOD = [*(a for n in INPUTS for a in ("--input", f"{n}:INT64:-1,-1")), "--output", "embedding:FP32:-1,32"]


@pytest.fixture
def add(triton, tmp_path):
    """`serving endpoints add NAME ...` against the module's Triton (GATEWAY_TRITON_GRPC_URL, as the gateway has it),
    on its host (SERVING_RUN_DIR: its run directory, with its model-control key), writing tmp_path/endpoints.json:
    the exit code and the output on one line."""

    def run(*args: str, env: dict | None = None) -> tuple[int, str]:
        argv = ["endpoints", "add", "emb", "--model", "encoder", *args, "--file", str(tmp_path / "endpoints.json")]
        host = {"GATEWAY_TRITON_GRPC_URL": triton.grpc_url, "SERVING_RUN_DIR": str(triton.launcher.run_dir)}
        result = CliRunner().invoke(app, argv, env={**host, **(env or {})})
        return result.exit_code, re.sub(r"\s+", " ", result.output)

    run.file = tmp_path / "endpoints.json"
    return run


def test_a_triton_endpoint_that_fits_its_model_is_written_without_a_note(add):
    code, output = add(*GOOD)
    assert code == 0 and "written" in output and "not checked" not in output, output
    code, output = add(*GOOD, "--model-version", "1")
    assert code == 0, output
    assert json.loads(add.file.read_text())["endpoints"]["emb"]["model_version"] == "1"


def test_clearml_servings_form_is_checked_the_same_way(add):
    declared = [
        *("--input-name", *INPUTS, "--input-type", "int64", "int64", "int64"),
        *("--input-size", "[-1, -1]", "[-1, -1]", "[-1, -1]"),
        *("--output-name", "embedding", "--output-type", "float32", "--output-size", "[-1, 32]"),
    ]
    code, output = add(*declared)
    assert code == 0, output
    declared[declared.index("--output-type") + 1] = "float16"
    declared[declared.index("--input-size") + 1] = "[-1]"  # clearml-serving's dims, without the batch axis
    code, output = add(*declared)
    assert code == 2, output
    assert "output 'embedding' is FP32 in Triton model 'encoder', declared FP16: use --output-type float32" in output
    assert (
        "input 'input_ids' has 2 axes in Triton model 'encoder', [-1, -1] (the batch axis, as max_batch_size is 64, "
        "then dims [-1]); declared 1 ([-1]): use --input-type int64 and --input-size '[-1, -1]' for 'input_ids'"
    ) in output


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            ("input_ids:INT64:-1,-1", "input_ids:INT32:-1,-1"),
            "input 'input_ids' is INT64 in Triton model 'encoder', declared INT32: use --input input_ids:INT64:-1,-1",
        ),
        (
            ("embedding:FP32:-1,32", "embedding:FP32:32"),
            "output 'embedding' has 2 axes in Triton model 'encoder', [-1, 32] (the batch axis, as max_batch_size is "
            "64, then dims [32]); declared 1 ([32]): use --output embedding:FP32:-1,32",
        ),
        (
            ("embedding:FP32:-1,32", "logits:FP32:-1,2"),
            "output 'logits' is not an output of Triton model 'encoder' (its outputs: embedding (FP32 [-1, 32]))",
        ),
        (
            ("token_type_ids:INT64:-1,-1", "token_ids:INT64:-1,-1"),
            "Triton model 'encoder' also needs input 'token_type_ids' (INT64 [-1, -1]), which is not declared: add "
            "--input token_type_ids:INT64:-1,-1",
        ),
    ],
)
def test_a_tensor_that_does_not_fit_is_refused_with_the_fix(add, change, says):
    code, output = add(*[change[1] if arg == change[0] else arg for arg in GOOD])
    assert code == 2 and says in output, output
    assert "(nothing written)" in output and not add.file.exists()


def test_a_model_or_version_triton_does_not_have_is_refused(add):
    code, output = add(*GOOD, "--model", "nosuchmodel")
    assert code == 2 and not add.file.exists()
    assert "has no model 'nosuchmodel' (its models: encoder, ensemble, tokenizer): check --model" in output, output
    code, output = add(*GOOD, "--model-version", "3")
    assert code == 2 and "Triton model 'encoder' has no ready version 3 (ready: 1): check --model-version" in output
    code, output = add(*GOOD, "--model", "tokenizer")  # in the repository, not loaded by this Triton
    assert code == 2 and "Triton model 'tokenizer' at" in output and "is not ready" in output, output


def test_without_the_control_key_a_missing_model_is_refused_without_triton_s_list(add, tmp_path):
    """Triton's model list is the control plane's (`services.triton.control_key`): another host's CLI still refuses
    what Triton does not serve, from readiness alone."""
    elsewhere = {"SERVING_RUN_DIR": str(tmp_path / "another-host")}
    code, output = add(*GOOD, "--model", "nosuchmodel", env=elsewhere)
    assert code == 2 and "has no ready model 'nosuchmodel': check --model" in output and "its models" not in output
    code, output = add(*GOOD, env=elsewhere)
    assert code == 0 and "not checked" not in output, output


def test_an_unreachable_triton_is_said_in_one_line_and_the_endpoint_added(add, triton):
    elsewhere = f"127.0.0.1:{free_port()}"
    code, output = add(*GOOD, "--triton-url", elsewhere, "--model", "nosuchmodel")
    assert code == 0, output
    assert f"note: Triton at {elsewhere} did not answer" in output and "not checked (--triton-url HOST:PORT" in output
    code, output = add(*GOOD, "--model", "nosuchmodel", env={"GATEWAY_TRITON_GRPC_URL": elsewhere})
    assert code == 0 and "not checked" in output, output
    code, output = add(*GOOD, "--model", "nosuchmodel", "--triton-url", triton.grpc_url)
    assert code == 2 and "has no model 'nosuchmodel'" in output

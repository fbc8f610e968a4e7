"""User errors end in one sentence and exit code 2, as a user sees them in a shell; --debug shows the traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def run(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("loadtest", "attack", "--engine", "ab", "--concurrency", "4"), "--engine ab needs --requests"),
        (("loadtest", "attack", "--engine", "ab", "--rate", "5", "--requests", "9"), "drop --rate"),
        (("loadtest", "attack", "--engine", "vegeta", "--rate", "5"), "`vegeta` is not on PATH"),
        (("loadtest", "payloads"), "no tokenizer at"),
        (("serving", "model", "build", "--model-dir", "/nonexistent"), "is not a Hugging Face checkpoint"),
        (
            ("serving", "endpoints", "add", "x", "--engine", "onnxruntime", "--model", "m", "--file", "e.json"),
            "field 'outputs' is empty",
        ),
    ],
)
def test_a_user_error_is_one_line_and_exit_code_2(tmp_path, argv, says):
    result = run(*argv, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert says in result.stderr.splitlines()[0], result.stderr
    assert "Traceback" not in result.stderr and "╭" not in result.stderr


def test_debug_shows_the_traceback(tmp_path):
    result = run("loadtest", "payloads", "--debug", cwd=tmp_path)
    assert result.returncode != 0 and "Traceback" in result.stderr

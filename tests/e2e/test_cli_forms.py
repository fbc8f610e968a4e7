"""The `serving model|endpoints|metrics` commands as the docs show them, run as typed.

The command lines are read from the docs at test time (README.md, docs/lifecycle.md, docs/clearml-serving.md,
docs/monitoring.md): every such command in a shell block, and every inline synopsis with arguments (`serving model
remove ENDPOINT --version N`; its optional parts, `[--json]`, are given). `run_documented_commands` runs them all
against the stack tests/e2e/test_serving_cli.py starts (Triton, the gateway with its admin API, the controller, the
registry with the trained `sentiment` version 1 deployed to the endpoint `sentiment`): no stack of its own.

What is not as typed: the lifecycle commands get `--url` (the test's gateway is on a free port, not 8080); the
placeholders of the synopses are substituted (`PLACEHOLDERS`); the commands run in a scratch checkout whose
build/model is the tiny model and where the files the docs' own here-documents write (`cat > my_preprocess.py <<EOF`)
are written first; `serving endpoints add` checks against the test's Triton (GATEWAY_TRITON_GRPC_URL).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from services.common.contract import NUMPY_DTYPES
from tests.support.docblocks import FENCE, REPO, SHELL, blocks, logical_lines

SERVING = str(Path(sys.executable).parent / "serving")
DOCS = ("README.md", "docs/lifecycle.md", "docs/clearml-serving.md", "docs/monitoring.md")
GROUPS = ("model", "endpoints", "metrics")
INLINE = re.compile(r"`(?:\.venv/bin/)?serving ((?:model|endpoints|metrics) [\w-]+ [^`|]+)`")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*$")
OPTIONAL = re.compile(r"^\[?(--[\w-]+|[A-Z][A-Z_]*)\]?$")
HEREDOC_FILE = re.compile(r"^cat > (?P<file>[\w./-]+) <<")
ADMIN = {"auto-update", "canary", "rollout", "list", "remove", "redeploy"}
"""The `serving model` commands that call the gateway's admin API (they get `--url`)."""
SENTIMENT_VERSIONS = ["2", "1"]
"""The endpoint's live versions, newest first, when the lifecycle commands run."""


def placeholders(checkpoint: Path, run_id: str) -> dict[str, str]:
    """What a synopsis's placeholders stand for here; "COMMAND WORD" entries are for that command only (`register`
    registers the tiny checkpoint under a name of its own, so the controller, which follows `sentiment`, ignores
    it; RUN is a run the test creates: a training run to log into)."""
    return {
        "ENDPOINT": "sentiment",
        "NAME": "sentiment",
        "N": "1",
        "V": "1",
        "register NAME": "docs-model",
        "CHECKPOINT": str(checkpoint),
        "FILE": str(REPO / "services" / "registry" / "data" / "sentiment.csv"),
        "RUN": run_id,
    }


@dataclass
class DocCommand:
    where: str
    words: list[str]
    """After `serving`, as the doc has them (placeholders, and a synopsis's brackets, still in)."""
    inline: bool

    @property
    def group(self) -> str:
        return self.words[0]

    @property
    def name(self) -> str:
        return self.words[1]

    def argv(self, values: dict[str, str]) -> list[str]:
        """The words with the placeholders substituted and a synopsis's optional parts given."""
        argv = []
        for word in self.words:
            if self.inline and OPTIONAL.match(word):
                word = OPTIONAL.match(word)[1]
            if PLACEHOLDER.match(word) and word not in NUMPY_DTYPES:
                value = values.get(f"{self.name} {word}", values.get(word))
                assert value is not None, f"{self.where}: placeholder {word} in `{self}`: add it to PLACEHOLDERS"
                word = value
            argv.append(word)
        return argv

    def __str__(self) -> str:
        return " ".join(["serving", *self.words])


def serving_words(line: str) -> list[str] | None:
    """The words after `serving` of a shell line running `serving model|endpoints|metrics ...`, up to a shell
    operator; None for any other line."""
    try:
        words = shlex.split(line.replace("\\\n", " "), comments=True)
    except ValueError:
        return None
    for i, word in enumerate(words):
        if Path(word).name == "serving" and i + 1 < len(words) and words[i + 1] in GROUPS:
            rest = words[i + 1 :]
            cut = next((j for j, w in enumerate(rest) if w in ("|", "||", "&&", ";", ">", ">>")), len(rest))
            return rest[:cut]
    return None


OWN_TESTS = [["model", "optimize"]]
"""Commands left to their own tests, with the blocks that hold them: `model optimize` takes minutes on a stack's
registered version (its quality search) and is run as documented by tests/integration/optimize/test_optimize.py on
the tiny model."""


def documented(doc: str) -> tuple[list[DocCommand], list[str]]:
    """The doc's commands in document order, and the here-document lines that write files the commands use."""
    path = REPO / doc
    commands, heredocs = [], []
    for block in blocks(path):
        if block.lang not in SHELL:
            continue
        lines = logical_lines(block.code)
        if any((words := serving_words(line)) is not None and words[:2] in OWN_TESTS for line in lines):
            continue  # the block's other commands use what that one makes
        number = block.line + 1
        for line in lines:
            if HEREDOC_FILE.match(line.strip()):
                heredocs.append(line.strip())
            elif (words := serving_words(line)) is not None:
                commands.append(DocCommand(f"{doc}:{number}", words, inline=False))
            number += line.count("\n") + 1
    fenced = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            found = [DocCommand(f"{doc}:{number}", m[1].split(), inline=True) for m in INLINE.finditer(line)]
            commands += [command for command in found if command.words[:2] not in OWN_TESTS]
    return sorted(commands, key=lambda c: int(c.where.rpartition(":")[2])), heredocs


def test_the_docs_commands_are_found_and_their_placeholders_known(tmp_path):
    """Cheap, without a stack: what `run_documented_commands` will run (an unknown placeholder fails here first)."""
    found = {doc: documented(doc)[0] for doc in DOCS}
    shown = {str(c) for commands in found.values() for c in commands}
    assert {c.group for commands in found.values() for c in commands} == set(GROUPS)
    for doc in ("docs/lifecycle.md", "docs/monitoring.md"):
        assert found[doc], f"no `serving model|endpoints|metrics` command found in {doc}"
    assert "serving model canary sentiment --versions 2 1 --weights 0.1 0.9" in shown, shown  # clearml-serving's
    assert "serving model remove ENDPOINT --version N" in shown
    values = placeholders(tmp_path / "checkpoint", "run")
    argvs = [c.argv(values) for commands in found.values() for c in commands]
    assert ["model", "list", "sentiment", "--json"] in argvs


def scratch_checkout(root: Path, model_dir: Path) -> Path:
    """The repository's entries as symlinks (the docs' relative paths work), with build/model the tiny model and
    no endpoint file of the repository's own."""
    root.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in {"build", "run", "results", "endpoints.json", ".git"}:
            (root / entry.name).symlink_to(entry)
    (root / "build").mkdir()
    (root / "build" / "model").symlink_to(model_dir)
    return root


@dataclass
class Lifecycle:
    """The stack test_serving_cli.py started, as these commands need it."""

    run_dir: Path
    url: str
    triton_grpc: str
    model_dir: Path


def run_documented_commands(stack: Lifecycle, work: Path) -> None:
    """Every documented command, as typed (see the module's docstring), each one ending with exit code 0. Each doc's
    commands run in its order; the docs (and `register`, an export taking seconds) run side by side."""
    from services.registry.mlflow_registry import ModelRegistry
    from services.registry.settings import RegistrySettings

    started = time.monotonic()
    registry = ModelRegistry(RegistrySettings(run_dir=stack.run_dir))
    first = registry.client.get_model_version("sentiment", "1")
    registry.client.create_model_version("sentiment", source=first.source, run_id=first.run_id)  # v2: a copy of v1
    with registry.mlflow.start_run(experiment_id=registry.experiment_id(), run_name="a training run") as run:
        pass
    values = placeholders(stack.model_dir.parent / "checkpoint", run.info.run_id)
    cwd = scratch_checkout(work / "checkout", stack.model_dir)
    env = {**os.environ, "SERVING_RUN_DIR": str(stack.run_dir), "GATEWAY_TRITON_GRPC_URL": stack.triton_grpc}
    sequences: dict[str, list[DocCommand]] = {}
    for doc in DOCS:
        commands, heredocs = documented(doc)
        for heredoc in heredocs:
            subprocess.run(["bash", "-c", heredoc], cwd=cwd, check=True, timeout=30)
        for command in commands:
            sequences.setdefault("register" if command.name == "register" else doc, []).append(command)

    def run_in_order(commands: list[DocCommand]) -> None:
        if any(c.group == "model" and c.name in ADMIN for c in commands):
            _wait_until_live(stack.url, "2")
        for command in commands:
            admin = command.group == "model" and command.name in ADMIN
            argv = command.argv(values) + (["--url", stack.url] if admin else [])
            _check(command, _run(command, argv, cwd, env))

    with ThreadPoolExecutor(len(sequences)) as pool:
        for done in [pool.submit(run_in_order, commands) for commands in sequences.values()]:
            done.result()
    count = sum(map(len, sequences.values()))
    print(f"{count} documented commands ran in {time.monotonic() - started:.1f} s")


def _run(command: DocCommand, argv: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    started = time.monotonic()
    result = subprocess.run([SERVING, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
    print(f"{command.where}: serving {shlex.join(argv)} ({time.monotonic() - started:.1f} s)")
    return result


def _check(command: DocCommand, result: subprocess.CompletedProcess) -> None:
    """Exit code 0; a `serving model` command's JSON is read (a listing's or a dry run's text is not), and a canary
    split is the one asked for."""
    assert result.returncode == 0, f"{command.where}: `{command}` failed:\n{result.stdout}\n{result.stderr}"
    text = command.name == "list" and "--json" not in command.words or "--dry-run" in command.words
    if command.group == "model" and not text:
        answer = json.loads(result.stdout)
        if command.name == "canary":
            newest = _values(command.words, "--newest")
            versions = _values(command.words, "--versions") or SENTIMENT_VERSIONS[: int(newest[0])]
            weights = [float(w) for w in _values(command.words, "--weights")]
            assert answer["traffic"] == pytest.approx(dict(zip(versions, weights, strict=True))), command.where


def _values(words: list[str], option: str) -> list[str]:
    """The values given to `option`, in either form (`--x a b` or `--x a --x b`)."""
    values, current = [], None
    for word in words:
        current = word if word.startswith("--") else current
        if current == option and not word.startswith("--"):
            values.append(word)
    return values


def _wait_until_live(url: str, version: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        versions = httpx.get(f"{url}/models/sentiment", timeout=10).json()["versions"]
        if any(v["version"] == version and v["state"] == "live" for v in versions):
            return
        time.sleep(0.5)
    raise AssertionError(f"version {version} of 'sentiment' was not live within {timeout:.0f}s: {versions}")

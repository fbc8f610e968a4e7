"""Docs that run: every `bash` and `python` block of README.md and docs/ runs here, as written, against a real stack;
the blocks that cannot run here are marked `<!-- not run: REASON -->` (rules: `tests.support.docblocks`).

Nothing in a block is substituted. The blocks run on the documented ports (8080, 8000-8002...) inside a network
namespace this module creates (`ip netns`, as root: developers and CI are), so they neither collide with another
stack on this machine nor reach any other host: `/docs` rendering there proves it needs no internet. Their working
directory is a scratch checkout (symlinks to the repository's files; `run/`, `endpoints.json` and what the blocks write
are its own), and `make` runs with `-o .venv/.installed -o .venv-checks/.installed`: the set-up is never redone by
this test (nor is checkov's environment made, which its blocks never use). Each stack the
blocks need is started once, with the first `make up ... DETACH=1` line that asks for it (blocks are grouped by
stack, in document order within a stack), and stopped once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.docblocks import PYTHON, REPO, Run, plan, stack_key
from tests.support.jsonsample import SampleParser, matches

RUNS, SKIPPED, PROBLEMS = plan()
KEEP_OUT = {"run", "results", "endpoints.json", "my_preprocess.py"}
"""Repository entries the blocks write: the scratch checkout has its own."""
DROPPED_ENV = ("SERVING_", "GATEWAY_", "CONTROLLER_", "REGISTRY_", "SUPERVISE_", "MLFLOW_", "OTEL_")
DEFAULT_STACK = "make up DETACH=1"


def by_stack(runs: list[Run]) -> list[Run]:
    """The runs grouped by stack (first appearance first), in document order within each: one start per stack."""
    order: dict[tuple, int] = {}
    for run in runs:
        order.setdefault(stack_key(run.stack), len(order))
    return sorted(runs, key=lambda run: order[stack_key(run.stack)])


@dataclass
class Sandbox:
    root: Path
    checkout: Path
    netns: str
    env: dict[str, str]
    stack: tuple | None = None
    failed: dict[tuple, str] = field(default_factory=dict)
    """Stacks that did not start, and why: their other blocks fail at once instead of trying again."""

    def sh(self, script: str, timeout: float, out: Path | None = None) -> subprocess.CompletedProcess:
        env = {**self.env, "DOCS_OUT": str(out or self.root)}
        return subprocess.run(
            ["ip", "netns", "exec", self.netns, "bash", "-c", script],
            cwd=self.checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def ensure(self, make_up: str) -> None:
        """The stack `make_up` starts is the one running (stopping another first)."""
        key = stack_key(make_up)
        if key == self.stack:
            return
        assert key not in self.failed, self.failed[key]
        if self.stack is not None:
            self.down()
        started = time.monotonic()
        up = self.sh(make_up, timeout=300)
        if up.returncode != 0:
            self.failed[key] = f"`{make_up}` failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
            self.down()
            pytest.fail(self.failed[key])
        self.stack = key
        print(f"`{make_up}` ready in {time.monotonic() - started:.1f} s")

    def down(self) -> None:
        self.sh("make down", timeout=120)
        self.stack = None


def _netns(name: str, *args: str) -> None:
    subprocess.run(["ip", "netns", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    if PROBLEMS:
        pytest.fail("blocks the runner cannot run:\n" + "\n".join(PROBLEMS))
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.fail("the doc test runs the blocks in a network namespace: run it as root, with iproute2")
    root = tmp_path_factory.mktemp("docs")
    checkout = root / "checkout"
    checkout.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in KEEP_OUT and (not entry.name.startswith(".") or entry.name == ".venv"):
            (checkout / entry.name).symlink_to(entry)
    tools = root / "bin"
    tools.mkdir()
    never = "-o .venv/.installed -o .venv-checks/.installed"  # make setup's stamps (the Makefile's set-up)
    (tools / "make").write_text(f'#!/bin/sh\nexec {shutil.which("make")} {never} "$@"\n')
    (tools / "make").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(DROPPED_ENV)}
    env["PATH"] = f"{tools}:{env['PATH']}"
    netns = f"docs-{os.getpid()}"
    _netns(netns, "add", netns)
    subprocess.run(["ip", "netns", "exec", netns, "ip", "link", "set", "lo", "up"], check=True)
    box = Sandbox(root, checkout, netns, env)
    try:
        yield box
    finally:
        box.down()
        pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout.split()
        for pid in pids:  # what `make down` left behind, all started by this module inside its namespace
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        _netns(netns, "delete", netns)


def test_swagger_ui_renders_without_internet(sandbox):
    """`/docs` in a real browser inside the namespace, which has no route to any other host: the operations render."""
    sandbox.ensure(DEFAULT_STACK)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "no chromium on PATH (apt-get install chromium)"
    flags = "--headless=new --no-sandbox --disable-gpu --virtual-time-budget=20000 --dump-dom"
    page = sandbox.sh(f"{chromium} {flags} http://localhost:8080/docs", timeout=120)
    assert "opblock" in page.stdout and "/serve/{endpoint}" in page.stdout, page.stdout[-2000:] + page.stderr[-2000:]


@pytest.mark.parametrize("run", by_stack(RUNS), ids=lambda run: run.block.where)
def test_block_runs_as_written(sandbox, run: Run):
    sandbox.ensure(run.stack)
    out = sandbox.root / "out" / run.block.where.replace("/", "_")
    out.mkdir(parents=True)
    started = time.monotonic()
    if run.block.lang in PYTHON:
        script = out / "block.py"
        script.write_text(run.script)
        done = sandbox.sh(f"{sandbox.checkout}/.venv/bin/python {script}", timeout=180)
    else:
        done = sandbox.sh(run.script, timeout=180, out=out)
    print(f"{run.block.where}: {time.monotonic() - started:.1f} s")
    assert done.returncode == 0, (
        f"{run.block.where} failed:\n{run.block.code}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    if run.block.lang in PYTHON:
        printed = [line.strip() for line in done.stdout.splitlines() if line.strip()]
        assert not run.samples or printed == run.samples, f"{run.block.where}: printed {printed}, docs: {run.samples}"
        return
    for index, sample in enumerate(run.samples):
        actual = json.loads((out / str(index)).read_text())
        differences = matches(SampleParser(sample).parse(), actual)
        assert not differences, f"{run.block.where}: the output differs from the docs' sample {sample}: {differences}"


def test_every_block_was_run_or_is_marked():
    """What ran and what is marked, for the report."""
    print(f"{len(RUNS)} blocks run, {len(SKIPPED)} marked not run:")
    for block in SKIPPED:
        print(f"  {block.where}: {block.not_run}")
    assert RUNS and not PROBLEMS

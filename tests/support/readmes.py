"""Run a README's shell blocks as a user would, in a workspace laid out like the repository (tests/e2e/
test_examples.py runs examples/*/README.md this way).

The blocks follow the rules of the docs that run (`tests.support.docblocks`): `make up`/`make down` lines are left to
the caller, which has the stack running; a command followed by a comment line holding a JSON sample must print JSON
of that shape. The one change made to a block: the documented ports (the gateway's 8080, Triton's HTTP 8000) become
the test stack's free ports.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.docblocks import SHELL, blocks, logical_lines, shell_script
from tests.support.jsonsample import SampleParser, matches

DROPPED_ENV = ("SERVING_", "GATEWAY_", "CONTROLLER_", "REGISTRY_", "SUPERVISE_", "MLFLOW_", "OTEL_")
"""The stack's own settings: a README's commands run with the user's environment, not the test's."""


@dataclass
class ReadmeRun:
    readme: Path
    seconds: float = 0.0
    outputs: list = field(default_factory=list)
    """The JSON each command with a sample printed, in order (checked against its sample)."""
    commands: list[str] = field(default_factory=list)
    """Every command the blocks ran (continuation lines joined), to look one up."""
    failure: str | None = None

    def command(self, prefix: str) -> str:
        found = [c for c in self.commands if c.startswith(prefix)]
        assert len(found) == 1, f"{self.readme}: {len(found)} commands start with {prefix!r}: {self.commands}"
        return found[0]


def run_readme(readme: Path, workspace: Path, ports: dict[str, str], out: Path, timeout: float = 120) -> ReadmeRun:
    """Each runnable shell block of `readme` in turn (bash, `set -eo pipefail`, cwd `workspace`), with the
    documented addresses in `ports` replaced ({"localhost:8080": "127.0.0.1:41234"}). The first block that fails,
    or prints something other than its sample, ends the run with `failure` saying why."""
    run = ReadmeRun(readme)
    env = {k: v for k, v in os.environ.items() if not k.startswith(DROPPED_ENV)}
    started = time.monotonic()
    for index, block in enumerate(b for b in blocks(readme) if b.lang in SHELL and b.not_run is None):
        script, samples = shell_script(block.code)
        for documented, actual in ports.items():
            script = script.replace(documented, actual)
        run.commands += commands(block.code)
        block_out = out / f"block{index}"
        block_out.mkdir(parents=True)
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=workspace,
            env={**env, "DOCS_OUT": str(block_out)},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            output = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            run.failure = f"{block.where} failed ({done.returncode}):\n{script}\n{output}"
            break
        for number, sample in enumerate(samples):
            actual = json.loads((block_out / str(number)).read_text())
            differences = matches(SampleParser(sample).parse(), actual)
            if differences:
                run.failure = f"{block.where}: the output differs from the README's sample {sample}: {differences}"
                break
            run.outputs.append(actual)
        if run.failure:
            break
    run.seconds = time.monotonic() - started
    return run


def commands(code: str) -> list[str]:
    """The commands of a shell block, each on one line (continuations joined, spaces collapsed)."""
    lines = [line for line in logical_lines(code) if line.strip() and not line.lstrip().startswith("#")]
    return [" ".join(line.replace("\\\n", " ").split()) for line in lines]


def commands_not_run(readme: Path) -> list[str]:
    """The commands of the shell blocks marked `<!-- not run: ... -->`."""
    return [c for block in blocks(readme) if block.lang in SHELL and block.not_run for c in commands(block.code)]

"""The code blocks of the documentation (README.md and docs/), and the plan to run them: docs that run.

Every fenced block whose language is a shell (`bash`, `sh`, `shell`, `console`) or Python (`python`, `py`, `pycon`)
either runs in the e2e tier (tests/e2e/test_docs.py) or is marked, on the line before its fence (blank lines
allowed between), with why it does not run here:

    <!-- not run: needs a GPU -->

The runner runs the blocks as written, on the documented ports, in a network namespace of their own. A block's stack
is the one its `make up ... DETACH=1` line starts or, without one, the one the last such block of the same page
started (a `make down` line ends it); the default is `make up DETACH=1` (STACK=clearml). The runner starts each stack
once (the block's own `make up` line) and stops it once, so those lines are not run again per block.

Shown output is checked: a shell command followed by a comment line holding a JSON sample (`# {"model": ...}`) must
print JSON of that shape (`tests.support.jsonsample.matches`), and `print(...)  # 384` in Python must print `384`.
What the runner cannot run (a foreground stack, Docker, Kubernetes, the benchmarks...) fails unless it is marked:
`problems_of` says which.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHELL = {"bash", "sh", "shell", "console"}
PYTHON = {"python", "py", "pycon"}
NOT_RUN = re.compile(r"^\s*<!--\s*not run:(.*?)-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
MAKE_UP = re.compile(r"^\s*make\s+up\b(?P<args>[^#]*)")
MAKE_DOWN = re.compile(r"^\s*make\s+down\b")
KNOBS = {"STACK": "clearml", "WORKERS": "1", "BATCHING": "on", "DEVICE": "cpu", "TRACES": "", "TRACE_RATIO": "1.0"}
"""The `make up` knobs a runnable block may set: with other ports or models the documented URLs would not apply."""
HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")
PRINT_OUTPUT = re.compile(r"^\s*print\(.*\)\s*#\s?(?P<out>.*)$")

CANNOT_RUN = [
    (
        re.compile(r"^\s*make\s+(test|test-\w+|lint|setup|bench|bench-\w+|soak|clean|registry|deploy-checks)\b", re.M),
        "a make target that takes minutes or changes the set-up",
    ),
    (
        re.compile(r"^\s*(sudo\s+)?(docker|kubectl|helm|nvidia-smi|apt-get|pip)\b", re.M),
        "Docker, Kubernetes, a GPU or an installation",
    ),
    (
        re.compile(r"\bserving\s+(up|down|train|registry|controller)\b"),
        "a command that starts or stops a stack, or "
        "takes minutes (the runner starts stacks with their documented `make up ... DETACH=1` line)",
    ),
    (re.compile(r"\bloadtest\s+(matrix|bench|tune|soak|overload)\b"), "a benchmark (minutes)"),
]


@dataclass
class Block:
    path: Path
    line: int
    lang: str
    code: str
    not_run: str | None
    """The reason given in the marker before the fence; None when the block is not marked."""

    @property
    def where(self) -> str:
        path = self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path
        return f"{path}:{self.line}"

    @property
    def runnable_lang(self) -> bool:
        return self.lang in SHELL | PYTHON


@dataclass
class Run:
    """A block to run, with the stack it needs."""

    block: Block
    stack: str
    """The `make up` line that starts the block's stack."""
    script: str = ""
    samples: list[str] = field(default_factory=list)
    """Shell: the JSON sample shown after each command whose output is checked, in order (the script writes each
    such command's output to `$DOCS_OUT/<index>`). Python: the lines `print` must write."""


def doc_files(root: Path = REPO) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, with its language and the `not run` marker before it."""
    found, lines, i = [], path.read_text().splitlines(), 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = NOT_RUN.match(before)
        start, i = i, i + 1
        body = []
        while i < len(lines) and not re.match(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[i]):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        lang = (opening["info"].strip().split() or [""])[0].lower()
        found.append(Block(path, start + 1, lang, "\n".join(body) + "\n", marker[1].strip() if marker else None))
        i += 1
    return found


def logical_lines(code: str) -> list[str]:
    """Shell lines with their continuations (`\\`) joined and here-documents kept whole."""
    out, lines, i = [], code.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line + "\n" + lines[i]
        heredoc = HEREDOC.search(line) if not line.lstrip().startswith("#") else None
        if heredoc:
            while i + 1 < len(lines):
                i += 1
                line += "\n" + lines[i]
                if lines[i].strip() == heredoc[1]:
                    break
        out.append(line)
        i += 1
    return out


def make_up_knobs(line: str) -> dict[str, str]:
    """`make up STACK=triton DETACH=1` -> its knobs; ValueError for a foreground stack or a knob the runner cannot
    honour on the documented ports."""
    knobs = dict(KNOBS)
    detached = False
    for word in shlex.split(MAKE_UP.match(line)["args"]):
        name, _, value = word.partition("=")
        if name == "DETACH":
            detached = bool(value)
        elif name in KNOBS:
            knobs[name] = value
        else:
            raise ValueError(f"`{line.strip()}`: {name} is not a knob the doc test can run with (mark the block)")
    if not detached:
        raise ValueError(f"`{line.strip()}` runs in the foreground: add DETACH=1 or mark the block")
    return knobs


def shell_script(code: str) -> tuple[str, list[str]]:
    """The block as a bash script without its `make up`/`make down` lines (the runner does those), each command that
    is followed by a JSON sample writing its output to `$DOCS_OUT/<n>` too."""
    lines = logical_lines(code)
    script, samples = ["set -eo pipefail"], []
    for index, line in enumerate(lines):
        if MAKE_UP.match(line) or MAKE_DOWN.match(line):
            continue
        following = lines[index + 1].strip() if index + 1 < len(lines) else ""
        if not line.lstrip().startswith("#") and re.match(r"^#\s*[\[{]", following):
            script.append(f'{{ {line}\n}} > "$DOCS_OUT/{len(samples)}"; cat "$DOCS_OUT/{len(samples)}"')
            samples.append(following.lstrip("#").strip())
        else:
            script.append(line)
    return "\n".join(script) + "\n", samples


URL = re.compile(r"^(https?://)?(localhost|127\.0\.0\.1|[\w.-]+:\d+)\b")


def unglobbed_curls(code: str) -> list[str]:
    """curl commands whose URL has braces or brackets (a PromQL query, say) without `-g`: curl reads those as its
    own URL globbing and fails ("bad range")."""
    found = []
    for line in logical_lines(code):
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        if not words or words[0] != "curl":
            continue
        globoff = "--globoff" in words or any(w.startswith("-") and not w.startswith("--") and "g" in w for w in words)
        if not globoff and any(URL.match(w) and re.search(r"[{}\[\]]", w) for w in words[1:]):
            found.append(line.strip())
    return found


def problems_of(block: Block) -> list[str]:
    """Why a block, as marked, is not acceptable: an empty reason, an unmarked block the runner cannot run, a command
    that fails as written whether or not it runs here."""
    if not block.lang:
        return [f"{block.where}: a fence without a language (`text` for output, `bash`/`python` for code)"]
    if block.lang in SHELL:
        unglobbed = unglobbed_curls(block.code)
        if unglobbed:
            return [f"{block.where}: curl needs -g for a URL with braces or brackets: {unglobbed}"]
    if block.not_run is not None:
        return [] if block.not_run else [f"{block.where}: `not run` needs a reason"]
    if not block.runnable_lang:
        return []
    if block.lang in SHELL:
        found = []
        for pattern, why in CANNOT_RUN:
            if pattern.search(block.code):
                found.append(f"{block.where}: {why}: mark it `<!-- not run: REASON -->`")
        for line in logical_lines(block.code):
            if MAKE_UP.match(line):
                try:
                    make_up_knobs(line)
                except ValueError as error:
                    found.append(f"{block.where}: {error}")
        return found
    return []


def plan(files: list[Path] | None = None) -> tuple[list[Run], list[Block], list[str]]:
    """(the blocks to run with their stacks, the blocks marked not run, the problems found)."""
    runs, skipped, problems = [], [], []
    for path in files or doc_files():
        stack = "make up DETACH=1"
        for block in blocks(path):
            problems += problems_of(block)
            if block.not_run is not None:
                skipped.append(block)
                continue
            if not block.runnable_lang:
                continue
            run = Run(block, stack)
            if block.lang in SHELL:
                for line in logical_lines(block.code):
                    if MAKE_UP.match(line):
                        run.stack = stack = "make up " + " ".join(MAKE_UP.match(line)["args"].split())
                run.script, run.samples = shell_script(block.code)
                if any(MAKE_DOWN.match(line) for line in block.code.splitlines()):
                    stack = "make up DETACH=1"
            else:
                run.script = block.code
                run.samples = [m["out"].strip() for m in map(PRINT_OUTPUT.match, block.code.splitlines()) if m]
            runs.append(run)
    return runs, skipped, problems


def stack_key(make_up: str) -> tuple:
    """Two `make up` lines with the same knobs start the same stack."""
    return tuple(sorted(make_up_knobs(make_up).items()))

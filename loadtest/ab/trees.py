"""The two trees `loadtest ab` races: HEAD, the checkout this `loadtest` runs from (uncommitted changes included),
and BASE, a revision checked out with `git worktree add --detach` under the work directory. Every `serving` command
of a tree runs in its root with its own code: HEAD with its own virtual environment; BASE with HEAD's environment
and PYTHONPATH set to its worktree when both pyproject.toml files declare the same [project] table (the same
pins, extras and scripts: then only the code differs), else with its own environment (`make setup` there, kept with
the worktree, which is named after the commit)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import loadtest
from loadtest.ab.plan import BASE, HEAD

ENV_MODES = ("auto", "shared", "own")


class TreeError(RuntimeError):
    """A tree that cannot be set up or served; the message says what to do."""


def git(root: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise TreeError(f"git {' '.join(args)} failed in {root}: {result.stderr.strip()}")
    return result.stdout.strip()


@dataclass(frozen=True)
class Tree:
    name: str
    """HEAD or BASE."""
    root: Path
    python: Path
    commit: str
    dirty: bool = False
    """Uncommitted changes, untracked files included (HEAD only: a worktree of a commit has none)."""
    pythonpath: bool = False
    """Every process gets PYTHONPATH=<root>: HEAD's environment serving this tree's code."""

    @property
    def label(self) -> str:
        return f"{self.commit[:12]}" + (" + uncommitted changes" if self.dirty else "")

    def env(self, run_dir: Path | None = None) -> dict[str, str]:
        """The environment of this tree's commands: the caller's, without its PYTHONPATH and VIRTUAL_ENV (a tree
        runs its own code), with SERVING_RUN_DIR when given."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "SERVING_RUN_DIR")}
        if self.pythonpath:
            env["PYTHONPATH"] = str(self.root)
        if run_dir is not None:
            env["SERVING_RUN_DIR"] = str(run_dir)
        return env

    def serving(
        self, *args: str, run_dir: Path | None = None, timeout: float = 900, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """`serving ARGS` of this tree, run in its root, with `env` added to its environment; output captured (stdout
        and stderr together)."""
        return subprocess.run(
            [str(self.python), "-m", "services.cli", *args],
            cwd=self.root,
            env=self.env(run_dir) | (env or {}),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )

    def check_imports(self) -> None:
        """Raise unless this tree's Python imports `services` from this tree's root."""
        probe = "import services; print(services.__file__)"
        result = subprocess.run(
            [str(self.python), "-c", probe], cwd=self.root, env=self.env(), capture_output=True, text=True
        )
        found = Path(result.stdout.strip() or "?").resolve()
        if result.returncode != 0 or self.root.resolve() not in found.parents:
            raise TreeError(
                f"{self.name}'s environment ({self.python}) imports services from {found}, not from {self.root}: "
                f"{result.stderr.strip()[-300:]}"
            )


def head_tree() -> Tree:
    """The checkout this `loadtest` runs from, with the Python running it."""
    root = Path(loadtest.__file__).resolve().parents[1]
    dirty = bool(git(root, "status", "--porcelain"))
    return Tree(HEAD, root, Path(sys.executable), git(root, "rev-parse", "HEAD"), dirty)


def resolve_commit(root: Path, revision: str) -> str:
    """The commit a revision names (a branch, tag, sha, `HEAD~1`); a TreeError when it names none."""
    try:
        return git(root, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    except TreeError:
        raise TreeError(f"--base {revision} names no commit in {root} (a branch, tag or sha)") from None


def default_base(head: Tree) -> str:
    """Where this branch left main (`git merge-base main HEAD`); when that is HEAD itself (on main): HEAD if the
    working tree has uncommitted changes (they are the change), else HEAD~1."""
    fork = git(head.root, "merge-base", "main", "HEAD")
    if fork != head.commit:
        return fork
    return head.commit if head.dirty else resolve_commit(head.root, "HEAD~1")


def base_worktree(head: Tree, commit: str, work_dir: Path) -> Path:
    """BASE's worktree, `<work_dir>/base-<commit>`, added detached at the commit, or reused when it is there."""
    path = (work_dir / f"base-{commit[:12]}").resolve()
    if path.exists():
        if git(path, "rev-parse", "HEAD") != commit or git(path, "status", "--porcelain", "--untracked-files=no"):
            raise TreeError(f"{path} is not a clean checkout of {commit[:12]}: `git worktree remove --force {path}`")
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    git(head.root, "worktree", "add", "--detach", str(path), commit)
    return path


def remove_worktree(head: Tree, path: Path) -> None:
    """Remove a worktree `base_worktree` added (its environment and builds with it)."""
    git(head.root, "worktree", "remove", "--force", str(path))


def same_project(head_root: Path, base_root: Path) -> bool:
    """Whether both pyproject.toml files declare the same [project] table (dependencies, extras, scripts)."""

    def project(root: Path) -> dict:
        return tomllib.loads((root / "pyproject.toml").read_text()).get("project", {})

    return project(head_root) == project(base_root)


def base_tree(
    head: Tree, commit: str, work_dir: Path, env_mode: str = "auto", log: Callable[[str], object] = print
) -> Tree:
    """BASE checked out and given an environment (`env_mode`: auto | shared | own; the module's docstring)."""
    if env_mode not in ENV_MODES:
        raise TreeError(f"--base-env takes {', '.join(ENV_MODES)}, not '{env_mode}'")
    root = base_worktree(head, commit, work_dir)
    shared = env_mode == "shared" or (env_mode == "auto" and same_project(head.root, root))
    if shared:
        tree = Tree(BASE, root, head.python, commit, pythonpath=True)
    else:
        log(f"[ab] BASE gets its own environment: `make setup` in {root} (minutes the first time, then kept)")
        own_env = Tree(BASE, root, head.python, commit).env()
        result = subprocess.run(["make", "-C", str(root), "setup"], env=own_env, stdout=sys.stderr)
        if result.returncode != 0:
            raise TreeError(f"`make setup` failed in {root} (exit {result.returncode}); its output is above")
        tree = Tree(BASE, root, root / ".venv" / "bin" / "python", commit)
    tree.check_imports()
    return tree

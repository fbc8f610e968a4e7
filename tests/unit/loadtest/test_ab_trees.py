"""`loadtest ab`'s trees on a real git repository in a temporary directory: the default BASE, BASE's worktree
(added, reused, refused when changed), when BASE may share HEAD's environment, and the environment each tree's
commands get."""

import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.ab.models import code_digest
from loadtest.ab.plan import BASE, HEAD
from loadtest.ab.trees import Tree, TreeError, base_worktree, default_base, resolve_commit, same_project
from tests.support.models import ROOT

PYPROJECT = '[project]\nname = "x"\ndependencies = ["numpy==1.26.4"]\n'


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


def commit(root: Path, message: str) -> str:
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", message)
    return git(root, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "pyproject.toml").write_text(PYPROJECT)
    commit(root, "first")
    (root / "a.py").write_text("A = 1\n")
    commit(root, "second")
    return root


def tree(root: Path, dirty: bool = False) -> Tree:
    return Tree(HEAD, root, Path("/usr/bin/python3"), git(root, "rev-parse", "HEAD"), dirty)


def test_the_default_base_is_where_the_branch_left_main(repo):
    fork = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-qb", "feature")
    (repo / "a.py").write_text("A = 2\n")
    commit(repo, "change")
    assert default_base(tree(repo)) == fork


def test_on_main_the_default_base_is_the_last_commit_or_the_one_before(repo):
    assert default_base(tree(repo)) == git(repo, "rev-parse", "HEAD~1"), "clean: HEAD~1"
    assert default_base(tree(repo, dirty=True)) == git(repo, "rev-parse", "HEAD"), "uncommitted changes: HEAD"


def test_a_revision_that_names_no_commit_is_refused(repo):
    assert resolve_commit(repo, "main~1") == git(repo, "rev-parse", "HEAD~1")
    with pytest.raises(TreeError, match="--base nope names no commit"):
        resolve_commit(repo, "nope")


def test_base_s_worktree_is_added_at_its_commit_then_reused_and_refused_once_changed(repo, tmp_path):
    first = git(repo, "rev-parse", "HEAD~1")
    path = base_worktree(tree(repo), first, tmp_path / "work")
    assert path.name == f"base-{first[:12]}" and git(path, "rev-parse", "HEAD") == first
    assert not (path / "a.py").exists(), "the checkout is BASE's, not HEAD's"
    assert base_worktree(tree(repo), first, tmp_path / "work") == path
    (path / "pyproject.toml").write_text("changed")
    with pytest.raises(TreeError, match="not a clean checkout"):
        base_worktree(tree(repo), first, tmp_path / "work")


def test_base_shares_head_s_environment_only_with_the_same_project_table(tmp_path):
    head, base = tmp_path / "h", tmp_path / "b"
    for root in (head, base):
        root.mkdir()
        (root / "pyproject.toml").write_text(PYPROJECT + "\n[tool.ruff]\nline-length = 120\n")
    assert same_project(head, base), "tool settings differ in nothing that is installed"
    (base / "pyproject.toml").write_text(PYPROJECT.replace("1.26.4", "2.0.0"))
    assert not same_project(head, base)


def test_a_tree_s_commands_get_its_own_code_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setenv("SERVING_RUN_DIR", "/somebody-elses-run")
    shared = Tree(BASE, tmp_path, Path("/usr/bin/python3"), "0" * 40, pythonpath=True)
    own = Tree(BASE, tmp_path, Path("/usr/bin/python3"), "0" * 40)
    assert shared.env(tmp_path / "run")["PYTHONPATH"] == str(tmp_path)
    assert shared.env(tmp_path / "run")["SERVING_RUN_DIR"] == str(tmp_path / "run")
    assert "PYTHONPATH" not in own.env() and "SERVING_RUN_DIR" not in own.env()


def test_a_tree_whose_python_imports_services_elsewhere_is_refused(tmp_path):
    Tree(HEAD, ROOT, Path(sys.executable), "0" * 40).check_imports()
    without_pythonpath = Tree(BASE, tmp_path, Path(sys.executable), "0" * 40)
    with pytest.raises(TreeError, match=f"imports services from {ROOT}/services"):
        without_pythonpath.check_imports()  # the editable install maps services to this checkout


def test_the_builder_digest_follows_the_builder_s_code(tmp_path):
    for name in ("h", "b"):
        (tmp_path / name / "services" / "modelbuild").mkdir(parents=True)
        (tmp_path / name / "services" / "common").mkdir(parents=True)
        (tmp_path / name / "services" / "modelbuild" / "export.py").write_text("X = 1\n")
    assert code_digest(tmp_path / "h") == code_digest(tmp_path / "b")
    (tmp_path / "b" / "services" / "common" / "contract.py").write_text("Y = 1\n")
    assert code_digest(tmp_path / "h") != code_digest(tmp_path / "b")


def test_a_recorded_stack_s_processes_are_its_pid_files_but_the_supervisor_s(tmp_path):
    import os

    from loadtest.ab.stack import RecordedStack
    from services.stacks import StackOptions

    for name in ("triton", "gateway", "supervisor"):
        (tmp_path / f"{name}.pid").write_text(f"{os.getpid()}\n")
    stack = RecordedStack(StackOptions(stack="clearml", run_dir=tmp_path), None)
    assert stack.groups() == {"triton": os.getpid(), "gateway": os.getpid()}
    assert stack.working_dirs() == {Path.cwd().resolve()}

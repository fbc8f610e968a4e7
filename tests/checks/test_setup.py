"""The Makefile's set-up, read with `make -n` (what make would run, nothing run) in a copy of the repository's
Makefile and pyproject.toml: `make setup`, which a fresh clone's first `make up` runs, installs everything `make test`
takes from a package index, so `make test` after it needs no network (issue 42: checkov installed on first use, and
offline the user saw only pip's DNS retries)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.docblocks import REPO


@pytest.fixture
def checkout(tmp_path) -> Path:
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(REPO / name, tmp_path / name)
        os.utime(tmp_path / name, (time.time() - 60, time.time() - 60))
    return tmp_path


def planned(checkout: Path, target: str) -> list[str]:
    """The recipe lines `make -n target` prints; the set-up's stamp files exist as `set_up` leaves them."""
    result = subprocess.run(["make", "-n", target], cwd=checkout, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def set_up(checkout: Path) -> None:
    """What `make setup` leaves: the stamp files its recipes touch, newer than what they were built from."""
    stamps = [line.split()[1] for line in planned(checkout, "setup") if line.startswith("touch ")]
    assert stamps, "make setup records what it installed"
    for stamp in stamps:
        (checkout / stamp).parent.mkdir(exist_ok=True)
        (checkout / stamp).touch()
        os.utime(checkout / stamp, (time.time() - 30, time.time() - 30))  # after the sources (a minute old)


def installs(lines: list[str]) -> list[str]:
    return [line for line in lines if "pip install" in line]


def test_setup_installs_the_deploy_checks_too(checkout):
    steps = [line for line in planned(checkout, "setup") if "[setup]" in line and "done in" not in line]
    assert len(steps) == 5 and "checkov" in steps[-1] and ".venv-checks" in steps[-1]


def test_after_setup_make_test_installs_nothing(checkout):
    set_up(checkout)
    assert installs(planned(checkout, "test")) == []
    assert installs(planned(checkout, "test-checks")) == []


def test_a_reinstall_says_what_it_fetches_before_pip_runs(checkout):
    """After a change to pyproject.toml the set-up runs again, each pip step announced first (offline, pip's own
    retries would otherwise be all the user sees)."""
    set_up(checkout)
    (checkout / "pyproject.toml").touch()
    lines = planned(checkout, "test")
    assert len(installs(lines)) == 4
    announced = False
    for line in lines:
        if "[setup]" in line and "done in" not in line:
            announced = True
        elif "pip install" in line:
            assert announced, f"not announced: {line}"
            announced = False

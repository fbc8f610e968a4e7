"""`loadtest ab` (what `make bench-ab` runs) for real and quickly: BASE=HEAD, one round of one configuration on the
tiny model. BASE is checked out as a worktree and served with its own code; the two stacks run one after the other
and the report pairs them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.models import ROOT

LOADTEST = str(Path(sys.executable).parent / "loadtest")


@pytest.fixture
def work_dir(tmp_path):
    """Where BASE's worktree goes; the worktree is removed from the repository afterwards."""
    work = tmp_path / "work"
    yield work
    for path in work.glob("base-*"):
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=False)


def test_bench_ab_races_head_against_a_worktree_of_its_commit(tmp_path, tiny_model, work_dir):
    # HEAD's builder finds the session's export of the same checkpoint up to date where it would write its own
    shutil.copytree(tiny_model, work_dir / "models" / "head" / "tiny-bert")
    result = subprocess.run(
        [
            LOADTEST,
            "ab",
            "--base",
            "HEAD",
            "--rounds",
            "1",
            "--models",
            "tiny",
            "--configs",
            "clearml-w1",
            "--duration",
            "2",
            "--warmup",
            "0.5",
            "--concurrency",
            "4",
            "--work-dir",
            str(work_dir),
            "--tiny-checkpoint",
            str(tiny_model.parent / "checkpoint"),
            "--out",
            str(tmp_path / "results"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    base_root = work_dir / f"base-{commit.strip()[:12]}"
    assert (base_root / "pyproject.toml").is_file(), "BASE is a worktree of HEAD's commit"
    (run,) = (tmp_path / "results").iterdir()
    records = json.loads((run / "rounds.json").read_text())
    assert [r["tree"] for r in records] == ["HEAD", "BASE"], "round 1, first pair: HEAD first"
    served = {r["tree"]: r["served_from"] for r in records}
    assert served == {"HEAD": [str(ROOT)], "BASE": [str(base_root.resolve())]}, "each tree serves its own code"
    for r in records:
        assert r["success"] == 1.0 and r["throughput"] > 0 and r["front_cpu_us_per_request"] > 0, r
        assert r["cpus"]["stack"] > 0 and r["cpus"]["others"] >= 0, "who had the CPUs during the step"
    report = (run / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| tiny | clearml-w1 |"))
    assert "| no verdict |" in row, "one round decides nothing"
    assert row in result.stdout, "the table is printed"
    assert "[ab] HEAD tiny model: up to date" in result.stderr
    assert "[ab] BASE tiny model: HEAD's build (the same builder and toolchain)" in result.stderr
    assert "[ab] step 1/2: round 1/1, HEAD" in result.stderr and "[ab] step 2/2: round 1/1, BASE" in result.stderr
    assert not list((run / "runs").iterdir()), "both stacks went down and left no run directory"
    assert len(list((run / "raw").rglob("*.jsonl"))) == 2, "each step's raw results"

"""A crafted deployment state against a real controller process and the real `serving state` commands, no Triton and no
registry needed: the attack of issue 37 (endpoint `../../...<dir>`, version `important` draining) had the controller
remove `<dir>/important` within seconds (`TritonSync.unload_drained` -> `TritonModels.remove`, before Triton's
refusal). Now `serving state restore` refuses the backup naming the field, and a state written straight into the
store is refused by the controller, said once, with nothing touched, until a valid state comes back."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from services.common.settings import default_state_url
from services.launcher import Launcher, ProcessSpec
from services.lifecycle.deployments import EndpointState
from services.lifecycle.store import DeploymentStore
from services.triton.control_key import KEY_FILE
from tests.support.state import escaping, write_document

SERVING = Path(sys.executable).parent / "serving"
INVALID = (
    r"WARNING .*the deployment state \(revision \d+\) is invalid: endpoints\.\.\./\.\./.*endpoint name.*; keeping the "
    r"last good state \(1 endpoints\), acting on none"
)
"""The controller's one line at the start of a tick that found the state invalid."""


def serving_state(run: Path, *argv: str) -> subprocess.CompletedProcess:
    """`serving state ...` as an operator runs it on the controller's host (its store: the run directory's)."""
    env = {**{k: v for k, v in os.environ.items() if k != "SERVING_STATE_URL"}, "SERVING_RUN_DIR": str(run)}
    return subprocess.run([str(SERVING), "state", *argv], env=env, capture_output=True, text=True, timeout=60)


def controller(run: Path) -> ProcessSpec:
    """The controller as `serving up` starts it, placing into a Triton that is away, its registry away too."""
    return ProcessSpec(
        name="controller",
        argv=[sys.executable, "-m", "services.controller"],
        env={
            "SERVING_RUN_DIR": str(run),
            "MLFLOW_TRACKING_URI": "http://127.0.0.1:1",
            "CONTROLLER_MODELS_DIR": str(run / "lifecycle" / "models"),
            "CONTROLLER_TRITON_REPOSITORY": str(run / "triton-repository"),
            "CONTROLLER_TRITON_HTTP_URL": "http://127.0.0.1:1",
            "CONTROLLER_INTERVAL": "0.2",
            "CONTROLLER_DRAIN_SECONDS": "0",
        },
        stop_timeout=10,
    )


def wait_for_log(log: Path, pattern: str, gone: Path, timeout: float = 90.0) -> str:
    """The controller's log once it matches `pattern`; fails at once if `gone` was removed meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        text = log.read_text() if log.exists() else ""
        assert gone.exists(), f"{gone} was removed by the controller; its log:\n{text[-3000:]}"
        if re.search(pattern, text):
            return text
        assert time.monotonic() < deadline, f"{pattern!r} not in the controller's log:\n{text[-3000:]}"
        time.sleep(0.2)


def test_a_crafted_state_is_refused_by_restore_and_by_a_running_controller(tmp_path):
    run = tmp_path / "run"
    for directory in ("lifecycle/models", "triton-repository"):  # as a controller that deployed has them
        (run / directory).mkdir(parents=True)
    (run / KEY_FILE).write_text("unit-control-key\n")
    victim = tmp_path / "victim"
    (victim / "important").mkdir(parents=True)
    (victim / "important" / "keep").write_text("kept")
    store = DeploymentStore.open(default_state_url(run))
    store.update(lambda s: s.endpoints.setdefault("emb", EndpointState()))

    assert serving_state(run, "backup", str(tmp_path / "crafted.db")).returncode == 0
    with sqlite3.connect(tmp_path / "crafted.db") as conn:
        conn.execute("UPDATE serving_deployment_state SET document = ?", (escaping(victim),))
    refused = serving_state(run, "restore", str(tmp_path / "crafted.db"))
    assert refused.returncode == 2 and "crafted.db is not a valid deployment state: endpoints.../../" in refused.stderr
    assert "[key]: endpoint name" in refused.stderr and sorted(store.read().endpoints) == ["emb"]

    launcher = Launcher(tmp_path)
    launcher.start(controller(run), detach=True)
    log = tmp_path / "logs" / "controller.log"
    try:
        wait_for_log(log, "controller watching the deployment state", victim / "important")
        write_document(store, escaping(victim))  # a row written straight into the store
        wait_for_log(log, INVALID, victim / "important")
        write_document(store, '{"endpoints": {"emb": {}}}')
        text = wait_for_log(log, "is readable again; carrying on", victim / "important")
    finally:
        launcher.stop_all()
    assert (victim / "important" / "keep").read_text() == "kept"
    assert len(re.findall(INVALID, text)) == 1, "said once, not once a tick"
    assert not list((run / "triton-repository").iterdir()) and not list((run / "lifecycle" / "models").iterdir())

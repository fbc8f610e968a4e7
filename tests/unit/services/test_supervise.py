"""The supervisor over plain Python processes: a killed process is started again with backoff, a wedged one (its
liveness check fails) is killed and started again, a crash loop is given up and reported, and `serving down`'s
stop stops the supervisor before anything it would restart."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable

import pytest

from services.launcher import SUPERVISOR, Launcher, ProcessSpec, Supervisor, SupervisorSettings, process_status
from services.launcher.records import read_meta, stop_recorded, write_meta
from services.launcher.restarts import RestartHistory, exit_reason
from tests.support.servers import processes_mentioning
from tests.unit.services.test_launcher import sleeper

FAST = SupervisorSettings(
    tick=0.05, backoff_initial=0.1, backoff_max=1, probe_period=0.1, probe_timeout=1, probe_failures=2, stop_grace=1
)


def until(supervisor: Supervisor, condition: Callable[[], bool], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within the time allowed"
        supervisor.tick()
        time.sleep(0.05)


def sleepers(tag: str) -> list[str]:
    """The sleeper and its child (not its log writer, whose command line names its log file, and so the tag)."""
    return [line for line in processes_mentioning(tag) if "time.sleep" in line]


def status(run_dir) -> dict[str, dict]:
    return {row["name"]: row for row in process_status(run_dir)}


@pytest.fixture
def tag() -> str:
    return f"supervise-test-{time.monotonic_ns()}"


def supervised(tmp_path, *specs: ProcessSpec, settings: SupervisorSettings = FAST) -> Supervisor:
    launcher = Launcher(tmp_path)
    for spec in specs:
        launcher.start(spec, detach=True)
    write_meta(tmp_path, {"name": SUPERVISOR, "pid": os.getpid()})  # this test is the supervisor
    return Supervisor(launcher, settings, detach=True, ready_timeout=10)


def test_backoff_doubles_with_each_restart_in_the_window_up_to_its_cap():
    history = RestartHistory(SupervisorSettings(backoff_initial=1, backoff_max=5, max_restarts=5, restart_window=60))
    assert [history.record(t) for t in (0, 1, 2, 3, 4)] == [1, 2, 4, 5, 5]
    assert history.record(5) is None, "a sixth restart within the window: give up"
    assert history.record(61) == 5 and history.total == 6, "the first restarts left the window"
    assert history.record(200) == 1, "a quiet window starts the backoff over"


def test_exit_reasons_name_the_signal_or_the_code():
    assert exit_reason(-9) == "killed by SIGKILL" and exit_reason(3) == "exited with code 3"


def test_a_killed_process_is_started_again_with_its_group_and_the_restart_recorded(tmp_path, tag):
    supervisor = supervised(tmp_path, sleeper(tag))
    first = supervisor.watched[0].proc.pid
    until(supervisor, lambda: len(sleepers(tag)) == 2)
    os.kill(first, signal.SIGKILL)  # its child (same group) is left running
    until(supervisor, lambda: supervisor.watched[0].phase == "running" and supervisor.watched[0].proc.pid != first)
    row = status(tmp_path)[tag]
    assert row["pid"] == supervisor.watched[0].proc.pid and row["state"] == "running"
    assert row["restarts"] == 1 and row["last_restart_reason"] == "killed by SIGKILL"
    until(supervisor, lambda: len(sleepers(tag)) == 2)
    assert not any(str(first) in line for line in processes_mentioning(tag)), "the old group was stopped"
    supervisor.launcher.stop_all()
    assert processes_mentioning(tag) == []


def test_a_wedged_process_is_reported_then_killed_and_started_again(tmp_path, tag):
    wedged = {"now": False}

    def liveness(timeout: float) -> None:
        if wedged["now"]:
            raise TimeoutError(f"no answer within {timeout:g}s")

    spec = sleeper(tag)
    spec.liveness = liveness
    supervisor = supervised(tmp_path, spec, settings=FAST.model_copy(update={"probe_failures": 3}))
    first = supervisor.watched[0].proc.pid
    wedged["now"] = True
    until(supervisor, lambda: supervisor.watched[0].probe_failures == 1)
    assert (
        status(tmp_path)[tag]["state"] == "wedged"
        and "no answer within 1s" in status(tmp_path)[tag]["last_probe_error"]
    )
    until(supervisor, lambda: supervisor.watched[0].phase == "backoff")
    wedged["now"] = False
    until(supervisor, lambda: supervisor.watched[0].phase == "running")
    row = status(tmp_path)[tag]
    assert row["pid"] != first and row["state"] == "running" and row["probe_failures"] == 0
    assert row["last_restart_reason"] == "wedged: 3 liveness probes failed (last: no answer within 1s)"
    supervisor.launcher.stop_all()


def test_the_tick_that_reads_a_probe_starts_the_next_one(tmp_path, tag):
    """A replica agent ticks its supervisor between its own calls to Triton, seconds apart while Triton hangs them:
    each tick reads one probe's result and starts the next, so three failures take four ticks, not six."""

    def liveness(timeout: float) -> None:
        raise TimeoutError("no answer")

    spec = sleeper(tag)
    spec.liveness = liveness
    supervisor = supervised(
        tmp_path, spec, settings=FAST.model_copy(update={"probe_period": 0.001, "probe_failures": 3})
    )
    time.sleep(0.01)
    for _ in range(4):
        supervisor.tick()
        if (probe := supervisor.watched[0].check) is not None:
            probe.exception(timeout=60)  # the probe's thread is done
        time.sleep(0.01)  # and the next probe due
    assert supervisor.watched[0].phase == "backoff"
    assert supervisor.watched[0].last_reason == "wedged: 3 liveness probes failed (last: no answer)"
    supervisor.stop()


def test_a_crash_loop_is_given_up_after_the_cap_and_reported(tmp_path):
    spec = ProcessSpec(name="crashes", argv=[sys.executable, "-c", "raise SystemExit(3)"], stop_timeout=1)
    supervisor = supervised(tmp_path, spec, settings=FAST.model_copy(update={"max_restarts": 2}))
    until(supervisor, lambda: supervisor.watched[0].phase == "failed")
    row = status(tmp_path)["crashes"]
    assert row["state"] == "failed" and row["restarts"] == 2 and row["last_restart_reason"] == "exited with code 3"
    for _ in range(5):
        supervisor.tick()
    assert supervisor.watched[0].restarts.total == 2, "left down"


def test_a_process_not_ready_after_a_restart_is_restarted_again(tmp_path, tag):
    spec = sleeper(tag)
    spec.ready_url = "http://127.0.0.1:9/never"  # nothing answers there
    supervisor = supervised(tmp_path, spec)
    supervisor.ready_timeout = 0.3
    os.kill(supervisor.watched[0].proc.pid, signal.SIGKILL)
    until(supervisor, lambda: supervisor.watched[0].restarts.total == 2)
    assert read_meta(tmp_path, tag)["last_restart_reason"] == "not ready after 0.3s"
    supervisor.launcher.stop_all()


def test_stop_recorded_stops_the_supervisor_before_what_it_supervises(tmp_path, tag):
    launcher = Launcher(tmp_path)
    launcher.start(sleeper(tag), detach=True)
    lone = f"import time; time.sleep(60)  # {tag}-supervisor"
    supervisor = launcher.start(ProcessSpec(name=SUPERVISOR, argv=[sys.executable, "-c", lone]), detach=True)
    assert {row["name"]: row["state"] for row in process_status(tmp_path)} == {SUPERVISOR: "running", tag: "running"}
    assert stop_recorded(tmp_path, timeout=5) == [SUPERVISOR, tag]
    assert supervisor.poll() is not None and processes_mentioning(tag) == []


def test_what_a_dead_supervisor_wrote_is_not_believed(tmp_path, tag):
    supervisor = supervised(tmp_path, sleeper(tag))
    supervisor.watched[0].phase = "backoff"
    supervisor._record(supervisor.watched[0])
    assert status(tmp_path)[tag]["state"] == "restarting"
    write_meta(tmp_path, {"name": SUPERVISOR, "pid": 999999999})
    assert status(tmp_path)[tag]["state"] == "running", "nothing restarts it: what runs is what counts"
    supervisor.launcher.stop_all()


def test_a_process_that_never_gets_ready_is_given_up_however_slowly_its_restarts_come():
    """Each readiness timeout takes longer than the window lets restarts add up: the restarts in a row that never
    got the process ready are counted apart, and past max_restarts of them it is given up."""
    history = RestartHistory(SupervisorSettings(backoff_initial=1, backoff_max=5, max_restarts=3, restart_window=60))
    delays = [history.record(t, was_ready=False) for t in (0, 200, 400)]
    assert None not in delays
    assert history.record(600, was_ready=False) is None
    history = RestartHistory(SupervisorSettings(backoff_initial=1, backoff_max=5, max_restarts=3, restart_window=60))
    assert None not in [history.record(t, was_ready=t % 400 == 0) for t in range(0, 2000, 200)], "ready in between"

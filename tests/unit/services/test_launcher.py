"""The launcher: process groups, pid files, readiness and stopping, with plain Python processes."""

import socket
import sys
import time

import pytest

from services.common.errors import ConfigurationError
from services.launcher import Launcher, ProcessSpec, free_port, port_free, recorded, stop_recorded
from tests.support.servers import processes_mentioning

SLEEPER = (
    "import time, subprocess, sys; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)  # {tag}-child']); "
    "time.sleep(60)  # {tag}"
)


def sleeper(tag: str) -> ProcessSpec:
    return ProcessSpec(name=tag, argv=[sys.executable, "-c", SLEEPER.format(tag=tag)], stop_timeout=5)


def test_stop_recorded_stops_the_whole_group_from_its_pid_file(tmp_path):
    tag = f"launcher-test-{time.monotonic_ns()}"
    Launcher(tmp_path).start(sleeper(tag), detach=True)
    deadline = time.monotonic() + 10
    while len(processes_mentioning(tag)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert recorded(tmp_path) == {tag: True}
    assert stop_recorded(tmp_path, timeout=5) == [tag]
    assert processes_mentioning(tag) == [], "the child of the process went with it"
    assert recorded(tmp_path) == {}


def test_a_process_that_exits_before_ready_is_reported_with_its_log(tmp_path):
    spec = ProcessSpec(
        name="dies",
        argv=[sys.executable, "-c", "print('no model here'); raise SystemExit(3)"],
        ready_url=f"http://127.0.0.1:{free_port()}/ready",
    )
    with pytest.raises(ConfigurationError, match=r"exited with code 3(.|\n)*no model here"):
        Launcher(tmp_path).start_ready(spec, detach=True, timeout=20)
    assert not list(tmp_path.glob("*.pid"))


def test_a_busy_port_is_refused_before_anything_starts(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert not port_free(port)
        spec = ProcessSpec(name="x", argv=[sys.executable, "-c", "pass"], ports=[port])
        with pytest.raises(ConfigurationError, match=f"port {port}"):
            Launcher(tmp_path).start(spec, detach=True)
    assert port_free(port)

"""When a stack has finished starting (`loadtest.stackrun`): real processes read from /proc, one that wants the CPU
all the time and one whose memory keeps growing are still starting, one that sleeps is settled."""

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from loadtest.stackrun import SETTLED_BUSY, SETTLED_GROWTH, groups_activity, still_starting

SLEEPS = "import time; print('asleep', flush=True); time.sleep(120)"
SPINS = "while True: pass"
GROWS = """
import time
kept = []
while True:
    kept.append(bytearray(8 << 20))  # 8 MB a turn, written: resident at once
    time.sleep(0.05)
"""


@pytest.fixture
def processes() -> Iterator[dict[str, subprocess.Popen]]:
    """Python processes the test starts, by name; killed when it ends."""
    started: dict[str, subprocess.Popen] = {}
    yield started
    for proc in started.values():
        proc.kill()
        proc.wait()


def test_a_process_that_spins_or_grows_is_still_starting_and_one_that_sleeps_is_not(processes):
    for name, code in (("sleeps", SLEEPS), ("spins", SPINS), ("grows", GROWS)):
        # each leads a session of its own, so a process group of its own
        processes[name] = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE)
    pids = {name: proc.pid for name, proc in processes.items()}
    assert processes["sleeps"].stdout.readline() == b"asleep\n"  # its interpreter has started

    before, began = groups_activity(list(pids.values())), time.monotonic()
    time.sleep(0.5)
    after = groups_activity(list(pids.values()))
    busy = still_starting(before, after, time.monotonic() - began)

    assert set(after) == set(pids.values()) and all(threads for threads, _ in after.values()), "read with threads"
    assert set(busy) == {pids["spins"], pids["grows"]}
    assert busy[pids["spins"]][0] >= SETTLED_BUSY, "a process that wants a CPU all the time"
    assert busy[pids["grows"]][1] >= SETTLED_GROWTH, "a process whose memory grows"

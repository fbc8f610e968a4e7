"""The log writer behind every background process (`observability.logfile`), over real processes and files: the
process is the command itself, its output lands in a file that rotates by size within its bound, a line without end
is cut, a line that cannot be written is dropped and counted, never blocking the command, and said once.

Before (issue 37): the launcher handed each process its log file as stdout; nothing rotated it (one keep-alive
client wrote 1.17 GB of gateway log in 23.5 s), and it was created with the command's umask (0644)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from observability.logfile import MAX_LINE
from services.launcher import Launcher, ProcessSpec
from services.launcher.settings import LogFileSettings

PRINTS = "import sys\nfor i in range({n}):\n    print(f'line {{i:06d}} ' + 'x' * 90, flush=True)\n"
"""A command printing `n` lines of 102 bytes."""


def writer(path: Path, *command: str, max_bytes: int = 4096, backups: int = 2, **kwargs) -> subprocess.Popen:
    argv = [sys.executable, "-m", "observability.logfile", str(path), "--max-bytes", str(max_bytes)]
    return subprocess.Popen([*argv, "--backups", str(backups), "--", *command], **kwargs)


def text(path: Path) -> str:
    """What `path` holds now; "" between a rotation's rename and the new file's creation."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def wait_until(condition, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.05)


def test_the_output_rotates_within_its_bound_and_keeps_the_newest_lines(tmp_path):
    log = tmp_path / "api.log"
    proc = writer(log, sys.executable, "-c", PRINTS.format(n=2000))  # 204 KB through a bound of 3 x 4 KB
    assert proc.wait(30) == 0
    wait_until(lambda: "line 001999" in text(log))
    files = sorted(tmp_path.iterdir())
    sizes = {path.name: path.stat().st_size for path in files}
    print(f"\n204 KB of output, max 4 KB x (2 + 1) files: {sizes}")
    assert [path.name for path in files] == ["api.log", "api.log.1", "api.log.2"], sizes
    assert all(size <= 4096 for size in sizes.values()), sizes
    assert all(path.stat().st_mode & 0o777 == 0o600 for path in files), "the owner's alone"
    kept = (tmp_path / "api.log.2").read_text() + (tmp_path / "api.log.1").read_text() + log.read_text()
    numbers = [int(line.split()[1]) for line in kept.splitlines()]
    assert numbers == list(range(numbers[0], 2000)), "the newest lines, in order, none lost within the bound"


def test_the_launcher_s_process_is_the_command_and_its_log_rotates(tmp_path):
    settings = LogFileSettings(max_bytes=4096, backups=1)
    code = PRINTS.format(n=500) + "import time\ntime.sleep(60)\n"
    launcher = Launcher(tmp_path, settings)
    proc = launcher.start(ProcessSpec(name="talker", argv=[sys.executable, "-c", code]), detach=True)
    log = launcher.log_path("talker")
    try:
        wait_until(lambda: "line 000499" in text(log))
        assert Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[:2] == [sys.executable.encode(), b"-c"]
        assert (tmp_path / "talker.pid").read_text() == str(proc.pid), "the recorded pid is the command's"
        assert sorted(p.name for p in log.parent.iterdir()) == ["talker.log", "talker.log.1"]
    finally:
        launcher.stop_all()
    assert proc.poll() is not None


def test_a_line_without_end_is_cut_and_the_next_lines_are_kept(tmp_path):
    log = tmp_path / "api.log"
    code = f"import sys; sys.stdout.write('y' * {3 * MAX_LINE + 10} + '\\nnext\\n')"
    assert writer(log, sys.executable, "-c", code, max_bytes=1 << 20).wait(30) == 0
    wait_until(lambda: log.read_text().endswith("next\n"))
    first, second = log.read_text().splitlines()
    assert first.startswith("y" * MAX_LINE)
    assert first.endswith(f"(line cut at {MAX_LINE} bytes, {2 * MAX_LINE + 10} more dropped)")
    assert second == "next"


FULL = """
import logging, resource, signal, sys
from observability.logfile import LogFile
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
handler = LogFile(sys.argv[1], 1 << 20, 2)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (2000, hard))  # the file cannot grow past 2,000 bytes: a full disk
for i in range(100):
    handler.handle(logging.makeLogRecord({"msg": f"line {i:03d} " + "z" * 40}))
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # room again
handler.handle(logging.makeLogRecord({"msg": "after"}))
handler.close()
"""


def test_lines_that_cannot_be_written_are_dropped_counted_and_said_once_when_there_is_room(tmp_path):
    """The file's size limit (RLIMIT_FSIZE: every write past it fails with EFBIG, as a full disk fails with ENOSPC)
    stands in for a full disk, in a process of its own."""
    log = tmp_path / "api.log"
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    subprocess.run([sys.executable, "-c", FULL, str(log)], check=True, timeout=30, env=env)
    lines = log.read_text().splitlines()
    written = [line for line in lines if line.startswith("line ") and len(line) == 49]
    notices = [line for line in lines if "were dropped" in line]
    print(f"\n{len(written)} lines written, then: {notices}")
    assert 0 < len(written) < 100 and lines[-1] == "after" and lines[-2] == notices[0], lines[-3:]
    (notice,) = notices
    dropped = int(notice.split()[0])
    assert len(written) + dropped in (100, 101), "each line written, or counted (a line cut by the failure: both)"
    assert " lines of this log were dropped from " in notice and "File too large" in notice

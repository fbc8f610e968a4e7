"""The trimmer (`services.common.memory`): what it was given runs once big work has stopped, and a process whose
trimmer is inside ONNX Runtime when the interpreter exits ends cleanly instead of aborting."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from services.common.memory import Trimmer

ROOT = Path(__file__).resolve().parents[3]

# The trimmer's thread runs a release that spends its time in ONNX Runtime (C++ behind pybind11, the GIL released),
# every run of it after the main thread has begun to end the interpreter. Before the trimmer stopped its thread at
# exit, the check at exit found the release unfinished every time and the process aborted ("terminate called without
# an active exception", SIGABRT) in 6 runs of 20.
EXITS_DURING_A_RELEASE = """
import atexit, threading
import numpy as np, onnxruntime as ort
from onnx import TensorProto, helper
from services.common.memory import Trimmer

x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])
graph = helper.make_graph([helper.make_node("MatMul", ["x", "x"], ["y"])], "square", [x], [y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
square = np.ones((256, 256), np.float32)
started, exiting, finished = threading.Event(), threading.Event(), threading.Event()

def release():
    started.set()
    exiting.wait()
    for _ in range(RUNS):
        session.run(None, {"x": square})
    finished.set()

atexit.register(lambda: print("release finished:", finished.is_set(), flush=True))  # runs after the trimmer's stop
Trimmer(delay=0).big_work_done(release)
started.wait()
exiting.set()
"""


def test_what_it_was_given_runs_once_big_work_stops_and_not_before():
    ran = threading.Event()
    trimmer = Trimmer(delay=3600)
    trimmer.big_work_done(ran.set)
    assert not ran.wait(0.05), "released while big work may still go on"
    trimmer.delay = 0
    trimmer.big_work_done()  # the last big work: due at once
    assert ran.wait(60)
    trimmer.stop()


def test_stopped_it_releases_nothing_more():
    ran = threading.Event()
    trimmer = Trimmer(delay=3600)
    trimmer.big_work_done(ran.set)
    trimmer.stop()
    assert not trimmer._thread.is_alive() and not ran.is_set(), "a release not yet due is dropped"
    trimmer.delay = 0
    trimmer.big_work_done(ran.set)
    assert not ran.is_set() and not trimmer._thread.is_alive()


def test_a_process_exiting_while_its_trimmer_runs_onnx_runtime_ends_cleanly():
    script = EXITS_DURING_A_RELEASE.replace("RUNS", "20")
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.splitlines() == ["release finished: True"], "the release was waited for"

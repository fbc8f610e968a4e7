"""`loadtest/cpu_breakdown.py` sorts a stack's threads by what they are: a Python-backend stub's main thread apart
from its other threads (ONNX Runtime's pool in the encoder), every other process by its command line."""

import os
import threading

from loadtest.cpu_breakdown import process_kind, thread_cpu, thread_kind


def test_a_stubs_python_thread_is_told_from_its_pool():
    assert thread_kind("stub:encoder", "python3", 10, 10) == "stub:encoder python thread"
    assert thread_kind("stub:encoder", "python3", 10, 11) == "stub:encoder other threads (ONNX Runtime pool)"
    assert thread_kind("tritonserver", "tritonserver", 5, 6) == "tritonserver"


def test_every_thread_of_a_process_group_is_read_with_its_cpu():
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        found = thread_cpu([os.getpgrp()])
    finally:
        stop.set()
        worker.join()
    mine = {tid: cpu for (pid, tid), (_, cpu) in found.items() if pid == os.getpid()}
    assert os.getpid() in mine and len(mine) >= 2, "the main thread and the waiting one"
    assert mine[os.getpid()] > 0, "this test's interpreter has run"
    assert process_kind(os.getpid()) == found[(os.getpid(), os.getpid())][0]

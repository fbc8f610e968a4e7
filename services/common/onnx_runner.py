"""An ONNX Runtime session built from the manifest: used by the FastAPI stack, the Triton Python-backend encoder and
the raw-throughput baseline of the benchmarks.

Memory: ONNX Runtime's CPU arena grows to the largest batch a session has run and keeps it. One burst of requests
of 64 texts of 256 tokens left a FastAPI worker at 1,993 MB against 295 MB before, and Triton's encoder at 1.75 GB
(issue 21); measured here, one 64 x 256 run took a session from 198 to 1,224 MB, kept. So a run over
`shrink_above` padded tokens asks the arena to give back what it no longer uses when it ends (ONNX Runtime's run
option `memory.enable_memory_arena_shrinkage`): the session stayed at 200 MB after the same run; and the C heap is
trimmed once such runs stop (`services.common.memory`). Runs up to that size (the usual traffic) keep the arena as it
is and pay nothing. Measured side by side on the real model at batch 16
(interleaved runs in one process, medians): see `SHRINK_ABOVE_TOKENS`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort

from services.common.contract import MODEL_FILE, Manifest
from services.common.memory import trimmer

SHRINK_ABOVE_TOKENS = 2048
"""Runs over this many padded tokens (rows x width) shrink the arena when they end."""
ARENA_SHRINKAGE = "memory.enable_memory_arena_shrinkage"


def default_threads(workers: int = 1) -> int:
    """Intra-op threads when several processes share the machine: cores divided among them, at least one."""
    return max(1, (os.cpu_count() or 1) // max(1, workers))


class OnnxModel:
    def __init__(
        self,
        model_dir: Path | str,
        manifest: Manifest,
        *,
        threads: int = 1,
        providers: list[str] | None = None,
        spin: bool = True,
        shrink_above: int = SHRINK_ABOVE_TOKENS,
    ):
        """`spin=False` stops idle intra-op threads from busy-waiting: better when other processes (tokenizing
        workers, a load generator) share the cores."""
        self.manifest = manifest
        self.shrink_above = shrink_above
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if not spin:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        available = ort.get_available_providers()
        chosen = [p for p in (providers or ["CPUExecutionProvider"]) if p in available] or ["CPUExecutionProvider"]
        self.session = ort.InferenceSession(str(Path(model_dir) / MODEL_FILE), options, providers=chosen)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self._shrinking = self.run_options(shrink=True)

    def run_options(self, *, shrink: bool = False) -> ort.RunOptions:
        """Options for one run: a caller that may stop the run keeps them and sets `terminate` (from any thread)."""
        options = ort.RunOptions()
        if shrink:
            options.add_run_config_entry(ARENA_SHRINKAGE, "cpu:0")
        return options

    def shrinks(self, feeds: dict[str, np.ndarray]) -> bool:
        """Whether a run on these inputs is big enough to give its arena memory back when it ends."""
        return feeds[self.input_names[0]].size > self.shrink_above

    def run(self, feeds: dict[str, np.ndarray], options: ort.RunOptions | None = None) -> np.ndarray:
        """Run the model on named inputs; returns the first (contract) output."""
        big = self.shrinks(feeds)
        if options is None and big:
            options = self._shrinking
        inputs = {name: feeds[name] for name in self.input_names}
        try:
            return self.session.run(self.output_names[:1], inputs, options)[0]
        finally:
            if big:
                trimmer.big_work_done()

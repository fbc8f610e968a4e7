"""An ONNX Runtime session built from the manifest: used by the FastAPI stack, the Triton Python-backend encoder and
the raw-throughput baseline of the benchmarks.

Memory: ONNX Runtime's CPU arena grows to the largest batch a session has run and keeps it. The arena stays as it
is while work goes on, and a run over `shrink_above` padded tokens marks the session: once such runs have stopped
for half a second (`services.common.memory`), one minimal run with the run option
`memory.enable_memory_arena_shrinkage` gives back every chunk no run is using, and the C heap is trimmed. Batches of
short sentences never trigger it; a burst of long texts pays one minimal run after it. The measurements behind this
choice: docs/decisions/request-bounds.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort

from services.common.contract import MODEL_FILE, Manifest
from services.common.devices import gpu_present, providers_for
from services.common.memory import trimmer

SHRINK_ABOVE_TOKENS = 1024
"""Runs over this many padded tokens (rows x width) have the arena shrunk once they stop: more than a full batch
of short sentences (64 x 16), and less than a call of a request cut in several (`max_batch_tokens`, 2048)."""
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
        device: str = "cpu",
        spin: bool = True,
        shrink_above: int = SHRINK_ABOVE_TOKENS,
    ):
        """`device`: cpu, or cuda (ConfigurationError naming what is missing where there is no GPU or CUDA
        provider: `services.common.devices.providers_for`). `spin=False` stops idle intra-op threads from
        busy-waiting: better when other processes (tokenizing workers, a load generator) share the cores."""
        self.manifest = manifest
        self.shrink_above = shrink_above
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if not spin:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        chosen = providers_for(device, ort.get_available_providers(), gpu_present())
        self.session = ort.InferenceSession(str(Path(model_dir) / MODEL_FILE), options, providers=chosen)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self._shrinking = ort.RunOptions()
        self._shrinking.add_run_config_entry(ARENA_SHRINKAGE, "cpu:0")
        self._smallest: dict[str, np.ndarray] = {
            spec.name: np.zeros((1, 1), spec.numpy_dtype) for spec in manifest.inputs
        }

    def run(self, feeds: dict[str, np.ndarray], options: ort.RunOptions | None = None) -> np.ndarray:
        """Run the model on named inputs; returns the first (contract) output. `options`: a caller that may stop the
        run keeps them and sets their `terminate` (from any thread)."""
        inputs = {name: feeds[name] for name in self.input_names}
        try:
            return self.session.run(self.output_names[:1], inputs, options)[0]
        finally:
            if inputs[self.input_names[0]].size > self.shrink_above:
                trimmer.big_work_done(self.release_arena)

    def release_arena(self) -> None:
        """Give back the arena's chunks no run is using: a minimal run that shrinks the arena when it ends."""
        self.session.run(self.output_names[:1], self._smallest, self._shrinking)

"""An ONNX Runtime session built from the manifest: used by the FastAPI stack, the Triton Python-backend encoder and
the raw-throughput baseline of the benchmarks."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort

from services.common.contract import MODEL_FILE, Manifest


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
    ):
        """`spin=False` stops idle intra-op threads from busy-waiting: better when other processes (tokenizing
        workers, a load generator) share the cores."""
        self.manifest = manifest
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

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """Run the model on named inputs; returns the first (contract) output."""
        return self.session.run(self.output_names[:1], {name: feeds[name] for name in self.input_names})[0]

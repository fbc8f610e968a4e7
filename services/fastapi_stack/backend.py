"""In-process model, run on a worker thread so the event loop keeps accepting and parsing requests: ONNX Runtime
(`device=cpu`), on its CUDA provider (`device=cuda`), or the simulated accelerator (`device=sim`,
`services.common.sim_device`) shared by the workers.

A request cancelled (its client gone, its deadline passed: `services.api.lifetime`) takes its run with it: one still
queued for the thread never starts, one under way stops at ONNX Runtime's next check (`RunOptions.terminate`), so the
requests behind it do not wait for work nobody will read."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort

from services.common.contract import Manifest
from services.common.onnx_runner import OnnxModel, default_threads
from services.common.settings import ApiSettings
from services.common.sim_device import SimDevice
from services.common.tokenization import EncodedBatch


class LocalOnnxBackend:
    stage = "inference"

    def __init__(self, settings: ApiSettings, manifest: Manifest):
        self.settings = settings
        self.manifest = manifest
        self.device: str = "gpu" if settings.device == "cuda" else settings.device  # as the x-device header names it
        self.model: OnnxModel | SimDevice | None = None
        # One inference at a time per worker: ONNX Runtime already uses intra_op_threads cores for it.
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="onnxruntime")

    async def start(self) -> None:
        settings = self.settings
        self.manifest.verify_files(settings.model_dir)
        if settings.device == "sim":
            self.model = SimDevice(
                self.manifest,
                fixed_us=settings.sim_fixed_us,
                per_token_us=settings.sim_per_token_us,
                lock_file=settings.sim_lock_file,
            )
            return
        threads = settings.intra_op_threads or default_threads(settings.workers)
        self.model = OnnxModel(settings.model_dir, self.manifest, threads=threads, device=settings.device)

    async def stop(self) -> None:
        self.executor.shutdown(wait=True)
        if isinstance(self.model, SimDevice):
            self.model.close()

    async def ready(self) -> bool:
        return self.model is not None

    async def infer(self, batch: EncodedBatch) -> np.ndarray:
        model = self.model
        assert model is not None, "backend not started"
        feeds = batch.tensors(self.manifest.input_names)
        options = ort.RunOptions()
        try:
            return await asyncio.get_running_loop().run_in_executor(self.executor, model.run, feeds, options)
        except asyncio.CancelledError:
            options.terminate = True
            raise

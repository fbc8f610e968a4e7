"""In-process ONNX Runtime, run on a worker thread so the event loop keeps accepting and parsing requests."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from services.common.contract import Manifest
from services.common.onnx_runner import OnnxModel, default_threads
from services.common.settings import ApiSettings
from services.common.tokenization import EncodedBatch


class LocalOnnxBackend:
    stage = "inference"

    def __init__(self, settings: ApiSettings, manifest: Manifest):
        self.settings = settings
        self.manifest = manifest
        self.model: OnnxModel | None = None
        # One inference at a time per worker: ONNX Runtime already uses intra_op_threads cores for it.
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="onnxruntime")

    async def start(self) -> None:
        threads = self.settings.intra_op_threads or default_threads(self.settings.workers)
        self.manifest.verify_files(self.settings.model_dir)
        self.model = OnnxModel(self.settings.model_dir, self.manifest, threads=threads)

    async def stop(self) -> None:
        self.executor.shutdown(wait=True)

    async def ready(self) -> bool:
        return self.model is not None

    async def infer(self, batch: EncodedBatch) -> np.ndarray:
        assert self.model is not None, "backend not started"
        feeds = batch.tensors(self.manifest.input_names)
        return await asyncio.get_running_loop().run_in_executor(self.executor, self.model.run, feeds)

"""The gateway's inference backend: tensors from the worker's tokenizer go to a Triton model version over gRPC."""

from __future__ import annotations

import contextlib

import numpy as np

from services.common.contract import Manifest
from services.common.errors import ServingError
from services.common.tokenization import EncodedBatch
from services.triton.grpc_client import TritonClient


class TritonBackend:
    """One Triton model version (`version` '' = Triton's version policy). With no `manifest` it only answers
    readiness for the whole server: the gateway without a built-in model."""

    stage = "triton"

    def __init__(self, triton: TritonClient, model: str | None, manifest: Manifest | None, version: str = ""):
        self.triton = triton
        self.model = model
        self.version = version
        self.manifest = manifest
        self.device = "unknown"
        """What the model's Triton configuration declares (`config_device`), read after its first answer."""

    async def start(self) -> None:
        """Nothing to load: readiness follows Triton (`ready`), so the gateway may start before Triton."""

    async def stop(self) -> None:
        await self.triton.close()

    async def ready(self) -> bool:
        return await self.triton.model_ready(self.model, self.version)

    async def infer(self, batch: EncodedBatch) -> np.ndarray:
        assert self.model is not None and self.manifest is not None, "a readiness-only backend serves no model"
        name = self.manifest.output.name
        outputs = await self.triton.infer(
            self.model, batch.tensors(self.manifest.input_names), [name], version=self.version
        )
        if self.device == "unknown":
            with contextlib.suppress(ServingError):  # the answer stands; the next one asks again
                self.device = await self.triton.model_device(self.model, self.version)
        return outputs[name]

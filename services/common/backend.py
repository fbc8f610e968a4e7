"""The inference backend contract: encoded tensors in, the model's output tensor out.

The FastAPI stack runs ONNX Runtime in-process; the gateway sends the tensors to Triton over gRPC. The data plane
does not know which.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from services.common.tokenization import EncodedBatch


class InferenceBackend(Protocol):
    async def start(self) -> None:
        """Connect or load; raise a ServingError if the backend cannot serve."""

    async def stop(self) -> None: ...

    async def ready(self) -> bool:
        """Whether a request sent now would be served."""

    async def infer(self, batch: EncodedBatch) -> np.ndarray:
        """The contract output for each row of the batch; raises ServingError subclasses."""

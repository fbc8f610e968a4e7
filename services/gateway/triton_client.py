"""The gateway's connection to Triton: tritonclient's asyncio gRPC client, one channel per worker, raw tensor
contents, a deadline on every call, gRPC failures mapped to the error hierarchy."""

from __future__ import annotations

import time

import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from observability.tracing import inject_headers, tracing_enabled
from services.common.errors import DeadlineExceeded, InvalidInput, NotFound, ServingError, Unavailable


class TritonClient:
    def __init__(self, url: str, *, timeout: float, retry_after: float):
        self.url = url
        self.timeout = timeout
        self.retry_after = retry_after
        self._client: grpcclient.InferenceServerClient | None = None
        self._ready_cache: dict[str, tuple[float, bool]] = {}

    @property
    def client(self) -> grpcclient.InferenceServerClient:
        if self._client is None:  # created lazily inside the worker's event loop
            self._client = grpcclient.InferenceServerClient(self.url)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def _error(self, exc: InferenceServerException, model: str) -> ServingError:
        status = exc.status() or ""
        message = exc.message() or str(exc)
        if "UNAVAILABLE" in status:
            if "queue" in message.lower():
                return Unavailable(f"Triton's queue for '{model}' is full; retry shortly", retry_after=self.retry_after)
            return Unavailable(f"Triton at {self.url} is unavailable ({message}); retry shortly",
                               retry_after=self.retry_after)
        if "DEADLINE_EXCEEDED" in status:
            return DeadlineExceeded(f"Triton did not answer within {self.timeout:g}s", retry_after=self.retry_after)
        if "INVALID_ARGUMENT" in status:
            return InvalidInput(f"Triton rejected the input: {message}")
        if "NOT_FOUND" in status or "unknown model" in message.lower():
            return NotFound(f"Triton has no model '{model}' loaded")
        return ServingError(f"Triton failed: {status} {message}")

    async def infer(self, model: str, inputs: dict[str, np.ndarray], outputs: list[str], *,
                    version: str = "") -> dict[str, np.ndarray]:
        tensors = []
        for name, array in inputs.items():
            tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        requested = [grpcclient.InferRequestedOutput(name) for name in outputs]
        headers = inject_headers({}) if tracing_enabled() else None
        try:
            result = await self.client.infer(model, tensors, model_version=version, outputs=requested,
                                             client_timeout=self.timeout, headers=headers)
        except InferenceServerException as exc:
            raise self._error(exc, model) from None
        return {name: result.as_numpy(name) for name in outputs}

    async def model_ready(self, model: str, max_age: float = 1.0) -> bool:
        """Whether Triton serves `model` now; cached for `max_age` seconds so probes do not hammer Triton."""
        checked, ready = self._ready_cache.get(model, (0.0, False))
        if time.monotonic() - checked < max_age:
            return ready
        try:
            ready = await self.client.is_model_ready(model, client_timeout=min(self.timeout, 2.0))
        except InferenceServerException:
            ready = False
        self._ready_cache[model] = (time.monotonic(), ready)
        return ready

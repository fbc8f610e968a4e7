"""What a stack plugs into the shared API.

- An `InferenceBackend` runs encoded tensors through one model version (ONNX Runtime in-process for the FastAPI
  stack; a Triton model version over gRPC for the gateway).
- A `ServedModel` is one model version the data plane can run: its contract (manifest), its own tokenizer, its
  backend.
- What an endpoint's `run` gets and gives (`ServeCall`, `Answer`, `Predict`, a pipeline step's `Collect`); the
  endpoint kinds themselves are `services.api.endpoint`'s.

The data plane (`services.api.dataplane`) is built from these and does not know which stack it serves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np

from services.common.contract import Manifest
from services.common.tokenization import EncodedBatch, TextTokenizer


class InferenceBackend(Protocol):
    stage: str
    """Name of the stage its `infer` is timed under in `serving_stage_duration_seconds` (`inference`, `triton`)."""
    device: str
    """Where its model runs, as the `x-device` header of its answers says: `cpu`, `gpu` or `sim` (the simulated
    accelerator); `unknown` until the backend has found out."""

    async def start(self) -> None:
        """Connect or load; raise a ServingError if the backend cannot serve."""

    async def stop(self) -> None: ...

    async def ready(self) -> bool:
        """Whether a request sent now would be served."""

    async def infer(self, batch: EncodedBatch) -> np.ndarray:
        """The contract output for each row of the batch; raises ServingError subclasses."""


@dataclass(frozen=True)
class ServedModel:
    endpoint: str
    version: str
    manifest: Manifest
    tokenizer: TextTokenizer
    backend: InferenceBackend
    run_id: str | None = None
    """The registry run that produced this version (deployed versions), for logs and lineage."""


class Answer(NamedTuple):
    """What an endpoint answers a `/serve` request: the JSON body, and the model name, version and device the
    response headers carry."""

    body: bytes
    model: str
    version: str
    device: str | None = None
    """Where the model ran (`x-device`); None for a pipeline's answer, whose code decides what runs where."""


Read = Callable[[], Awaitable[bytes]]
"""Reads the request's whole body (the limits checked), once."""
Predict = Callable[[ServedModel, list[str], "bool | None"], Awaitable[Any]]
"""The data plane's prediction of texts by a model version (token budget, coalescing): a `Prediction`."""


@dataclass(frozen=True, slots=True)
class ServeCall:
    """One `/serve/{endpoint}[/{version}]` request, as its endpoint's `run` gets it."""

    version: str | None
    """The version the path names, or None: the endpoint's policy chooses."""
    read: Read
    routing_key: str | None
    """The `x-canary-key` header: the same key stays on one version while a canary runs."""
    content_type: str | None
    """How a pipeline gets the body (parsed JSON, or bytes)."""
    declared: Any = None
    """The custom statistics declared for the endpoint (`services.monitoring.statistics.EndpointMetrics`), or None."""


Collect = Callable[[dict | None], None]
"""clearml-serving's `collect_custom_statistics_fn`: a step reports values of the request's declared variables."""

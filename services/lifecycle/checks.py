"""The checks a fetched registry version must pass before it gets traffic, shared by the controller (on its own copy)
and the replica agents (through their Triton): the endpoint's tensor contract, an answer of the manifest's shape,
and reasons the open `GET /models/{endpoint}` may show."""

from __future__ import annotations

import re

import numpy as np

from services.common.contract import WARMUP_TEXTS, Manifest
from services.lifecycle.deployments import EndpointState

_ABSOLUTE_PATH = re.compile(r"(?<![\w.~:/-])/[^\s'\"`:,;()\[\]]*")


def public_reason(text: str) -> str:
    """`text` as the open `GET /models/{endpoint}` may show it: each absolute path cut to its last part."""
    return _ABSOLUTE_PATH.sub(lambda found: ".../" + found.group(0).rstrip("/").rsplit("/", 1)[-1], text)


def check_contract(endpoint: EndpointState, manifest: Manifest) -> None:
    """The endpoint's tensor contract (fixed by its first live version) is the version's."""
    if endpoint.contract_outputs and (manifest.inputs, manifest.outputs) != (
        endpoint.contract_inputs,
        endpoint.contract_outputs,
    ):
        raise ValueError(
            f"tensor contract differs from the endpoint's: inputs {[t.model_dump() for t in manifest.inputs]}, "
            f"outputs {[t.model_dump() for t in manifest.outputs]}; the endpoint serves "
            f"outputs {[t.model_dump() for t in endpoint.contract_outputs]}"
        )


def check_output(outputs: np.ndarray, manifest: Manifest) -> None:
    """An answer to the warm-up texts has the manifest's output shape and only finite values."""
    expected = [len(WARMUP_TEXTS), *manifest.output.shape[1:]]
    if list(outputs.shape) != [d if d != -1 else outputs.shape[i] for i, d in enumerate(expected)]:
        raise ValueError(f"output shape {list(outputs.shape)} does not match the manifest's {expected}")
    if not np.isfinite(outputs).all():
        raise ValueError("the model's output has NaN or infinite values")

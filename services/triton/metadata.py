"""What a Triton model declares (its metadata and config, over gRPC), and how a configured endpoint's declared tensors
differ from it: what `serving endpoints add` can know at write time instead of at the first request.

Checked: the model exists and is ready (the given version, else any), every declared input and output is one of the
model's, with the model's dtype and rank (the metadata's shape, which starts with the batch axis when the model's
max_batch_size is above 0), and every input the model needs is declared (the gateway sends only the declared ones).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from services.common.contract import TensorSpec
from services.common.errors import ConfigurationError, NotFound
from services.triton.control_key import GRPC_HEADER

if TYPE_CHECKING:
    from tritonclient.grpc import InferenceServerClient

TIMEOUT = 5.0
"""Seconds each call to Triton may take."""

Fix = Callable[[str, TensorSpec], str]
"""The option that declares a tensor as Triton has it, for the message: ("input", spec) -> "--input a:INT64:-1,-1"."""


class TritonUnreachable(Exception):
    """Triton did not answer at that address: nothing could be checked."""


@dataclass(frozen=True)
class ModelTensors:
    """A ready Triton model's tensors, as its metadata gives them (the shape with the batch axis)."""

    model: str
    max_batch_size: int
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    optional: frozenset[str]
    """Inputs the model's config marks optional."""

    def axes(self, spec: TensorSpec) -> str:
        """The shape in words: `[-1, -1]` (the batch axis, as max_batch_size is 64, then dims [-1])."""
        if self.max_batch_size > 0:
            return f"{spec.shape} (the batch axis, as max_batch_size is {self.max_batch_size}, then dims {spec.dims})"
        return f"{spec.shape} (no batch axis: max_batch_size is 0)"


def _tensors(entries: list[dict]) -> dict[str, TensorSpec]:
    """As the metadata has them: a dtype this project has no numpy type for (BF16) is compared, not refused."""
    return {
        e["name"]: TensorSpec.model_construct(
            name=e["name"], dtype=e["datatype"], shape=[int(d) for d in e.get("shape", [])]
        )
        for e in entries
    }


def model_tensors(
    url: str, model: str, version: str = "", timeout: float = TIMEOUT, control_key: str | None = None
) -> ModelTensors:
    """The tensors of Triton model `model` (at `version`, else Triton's policy) at gRPC address `url`.
    TritonUnreachable if Triton does not answer; NotFound for a model Triton does not have; ConfigurationError for
    one (or a version) that is not ready. `control_key` lets Triton's model list name what it has; without it a
    model that is not ready is refused without the list."""
    from tritonclient.grpc import InferenceServerClient
    from tritonclient.utils import InferenceServerException

    from services.triton.target import parse_target

    client = InferenceServerClient(parse_target(url).target)  # several replicas: any of them holds the model
    try:
        headers = {GRPC_HEADER: control_key} if control_key else None
        try:
            index = client.get_model_repository_index(headers=headers, as_json=True, client_timeout=timeout)
            index = index.get("models", [])
        except InferenceServerException as exc:
            if "restricted" not in str(exc.message()):
                raise TritonUnreachable(f"Triton at {url} did not answer ({exc.status() or exc})") from None
            index = None  # the list is the control plane's: readiness alone says what is wrong
        _check_ready(client, url, model, version, index, timeout)
        metadata = client.get_model_metadata(model, version, as_json=True, client_timeout=timeout)
        config = client.get_model_config(model, version, as_json=True, client_timeout=timeout)["config"]
    except InferenceServerException as exc:
        raise ConfigurationError(f"Triton at {url} could not describe model '{model}': {exc.message()}") from None
    finally:
        client.close()
    return ModelTensors(
        model=model,
        max_batch_size=int(config.get("max_batch_size", 0)),
        inputs=_tensors(metadata.get("inputs", [])),
        outputs=_tensors(metadata.get("outputs", [])),
        optional=frozenset(i["name"] for i in config.get("input", []) if i.get("optional")),
    )


def _check_ready(
    client: InferenceServerClient, url: str, model: str, version: str, index: list[dict] | None, timeout: float
) -> None:
    if index is None:
        if not client.is_model_ready(model, version, client_timeout=timeout):
            which = f"version {version} of " if version else ""
            raise NotFound(f"Triton at {url} has no ready {which}model '{model}': check --model and --model-version")
        return
    entries = [e for e in index if e.get("name") == model]
    if not entries:
        names = ", ".join(sorted({e["name"] for e in index})) or "none"
        raise NotFound(f"Triton at {url} has no model '{model}' (its models: {names}): check --model")
    if client.is_model_ready(model, version, client_timeout=timeout):
        return
    ready = sorted(e["version"] for e in entries if e.get("state") == "READY" and e.get("version"))
    if version and ready:
        raise ConfigurationError(
            f"Triton model '{model}' has no ready version {version} (ready: {', '.join(ready)}): check --model-version"
        )
    states = "; ".join(f"{e.get('state') or 'not loaded'} {e.get('reason', '')}".strip() for e in entries)
    raise ConfigurationError(f"Triton model '{model}' at {url} is not ready ({states}): load it, or check --model")


def differences(found: ModelTensors, inputs: list[TensorSpec], outputs: list[TensorSpec], fix: Fix) -> list[str]:
    """What the declared tensors get wrong about the model, each with the option that fixes it; empty: nothing."""
    problems = []
    for direction, declared, actual in (("input", inputs, found.inputs), ("output", outputs, found.outputs)):
        for spec in declared:
            problems += _compare(found, direction, spec, actual, fix)
    names = {spec.name for spec in inputs}
    for name, spec in found.inputs.items():
        if name not in names and name not in found.optional:
            problems.append(
                f"Triton model '{found.model}' also needs input '{name}' ({spec.dtype} {spec.shape}), which is not "
                f"declared: add {fix('input', spec)}"
            )
    return problems


def _compare(
    found: ModelTensors, direction: str, spec: TensorSpec, actual: dict[str, TensorSpec], fix: Fix
) -> list[str]:
    model = f"Triton model '{found.model}'"
    theirs = actual.get(spec.name)
    if theirs is None:
        listed = ", ".join(f"{t.name} ({t.dtype} {t.shape})" for t in actual.values()) or "none"
        return [f"{direction} '{spec.name}' is not an {direction} of {model} (its {direction}s: {listed})"]
    problems = []
    if theirs.dtype != spec.dtype:
        what = f"{direction} '{spec.name}' is {theirs.dtype} in {model}, declared {spec.dtype}"
        problems.append(f"{what}: use {fix(direction, theirs)}")
    if len(theirs.shape) != len(spec.shape):
        what = f"{direction} '{spec.name}' has {len(theirs.shape)} axes in {model}, {found.axes(theirs)}"
        problems.append(f"{what}; declared {len(spec.shape)} ({spec.shape}): use {fix(direction, theirs)}")
    return problems

"""The endpoint file: a JSON file declares each configured endpoint's engine, Triton model, preprocess code and
tensors, and the custom statistics of any endpoint. `serving endpoints ...` and `serving metrics ...` edit it;
workers follow it (`watcher.FileWatcher`) and build its endpoints (`configured.ConfiguredEndpoints`).

    {"endpoints": {"sst2": {"engine": "triton", "model": "encoder", "preprocess": "preprocess.py",
                            "inputs": [{"name": "input_ids", "dtype": "INT64", "shape": [-1, -1]}, ...],
                            "outputs": [{"name": "logits", "dtype": "FP32", "shape": [-1, 2]}]}}}
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from services.common.contract import TensorSpec
from services.common.errors import ConfigurationError
from services.monitoring.statistics import EndpointMetrics


class EndpointConfig(BaseModel):
    engine: Literal["triton", "onnxruntime", "custom"] = "triton"
    """triton: send the preprocess output to a Triton model over gRPC; onnxruntime: run an exported model
    in-process; custom: the preprocess class's own `process`."""
    model: str | None = None
    """triton: the Triton model name; onnxruntime: an exported model directory (manifest.json, model.onnx)."""
    model_version: str = ""
    """Triton model version ('' = Triton's policy)."""
    version: str | None = None
    """The version in /serve/{endpoint}/{version}; None accepts any."""
    preprocess: str | None = None
    """A Python file or package folder defining `class Preprocess` (clearml-serving's contract); a relative path is
    relative to the endpoint file's folder."""
    model_file: str | None = None
    """Passed to `Preprocess.load(local_file_name)`."""
    inputs: list[TensorSpec] = Field(default_factory=list)
    outputs: list[TensorSpec] = Field(default_factory=list)


class EndpointsFile(BaseModel):
    endpoints: dict[str, EndpointConfig] = Field(default_factory=dict)
    metrics: dict[str, EndpointMetrics] = Field(default_factory=dict)
    """Custom statistics declared per endpoint name (`serving metrics add`): for configured, deployed or built-in
    endpoints alike."""
    invalid: dict[str, str] = Field(default_factory=dict, exclude=True)
    """Entries that failed validation, with what to fix; the valid ones are still served."""

    @classmethod
    def read(cls, path: Path) -> EndpointsFile:
        """Each entry validated on its own: one bad entry never hides the others. A file that is not a JSON object
        of endpoints at all is a ConfigurationError."""
        if not path.is_file():
            return cls()
        try:
            raw = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"endpoint file {path} is not valid JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise ConfigurationError(f'endpoint file {path} must be an object {{"endpoints": {{NAME: {{...}}}}}}')
        endpoints, metrics, invalid = {}, {}, {}
        for section, model, found in (("endpoints", EndpointConfig, endpoints), ("metrics", EndpointMetrics, metrics)):
            entries = raw.get(section, {})
            if not isinstance(entries, dict):
                raise ConfigurationError(f'endpoint file {path}: "{section}" must be an object keyed by endpoint name')
            for name, entry in entries.items():
                try:
                    found[name] = model.model_validate(entry)
                except ValidationError as exc:
                    error = exc.errors()[0]
                    field = ".".join(str(part) for part in error["loc"]) or "(entry)"
                    where = name if section == "endpoints" else f"metrics of '{name}'"
                    invalid[where] = f"field '{field}': {error['msg'].removeprefix('Value error, ')}"
        return cls(endpoints=endpoints, metrics=metrics, invalid=invalid)

    def write(self, path: Path) -> None:
        """Atomic replace, so a worker never reads a half-written file."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        entries = {name: config.model_dump(exclude_defaults=True) for name, config in self.endpoints.items()}
        declared = {name: item.model_dump(exclude_defaults=True) for name, item in self.metrics.items()}
        tmp.write_text(json.dumps({"endpoints": entries, "metrics": declared}, indent=2) + "\n")
        os.replace(tmp, path)

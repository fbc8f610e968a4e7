"""The endpoint file: a JSON file declares each configured endpoint's engine, Triton model, preprocess code and
tensors, and the custom statistics of any endpoint. `serving endpoints ...` and `serving metrics ...` edit it;
workers follow it (`file_source.FileWatcher`) and build its endpoints (`configured.build_configured`). Every change
goes through `EndpointsFile.update` (a `LockedFile`): two commands at once never lose each other's change.

    {"endpoints": {"sst2": {"engine": "triton", "model": "encoder", "preprocess": "preprocess.py",
                            "inputs": [{"name": "input_ids", "dtype": "INT64", "shape": [-1, -1]}, ...],
                            "outputs": [{"name": "logits", "dtype": "FP32", "shape": [-1, 2]}]}}}
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from services.common.contract import TensorSpec
from services.common.errors import ConfigurationError
from services.common.locked_file import LockedFile
from services.common.names import RULE, is_valid_name, printable, shown
from services.gateway.engine_names import NAMES, SENDS_TO_TRITON
from services.monitoring.statistics import EndpointMetrics

T = TypeVar("T")
SECTIONS = ("endpoints", "metrics")


class EndpointConfig(BaseModel):
    engine: str = Field("triton", json_schema_extra={"enum": list(NAMES)})
    """One of the engines (`services.gateway.engines`, each with a one-line summary of its step)."""
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
    """The model file: passed to `Preprocess.load(local_file_name)`, and loaded by the sklearn, xgboost and lightgbm
    engines; a relative path is relative to the endpoint file's folder."""
    inputs: list[TensorSpec] = Field(default_factory=list)
    outputs: list[TensorSpec] = Field(default_factory=list)

    @field_validator("engine")
    @classmethod
    def _registered(cls, engine: str) -> str:
        if engine not in NAMES:
            raise ValueError(f"engine {shown(engine)} is not one of {', '.join(NAMES)}")
        return engine

    @model_validator(mode="after")
    def _triton_model_name(self) -> EndpointConfig:
        """A Triton model is named by the same rule as endpoints (`services.common.names`)."""
        if self.engine in SENDS_TO_TRITON and self.model is not None and not is_valid_name(self.model):
            raise ValueError(f"Triton model name {shown(self.model)} is not valid: use {RULE}")
        return self

    @model_validator(mode="after")
    def _distinct_tensor_names(self) -> EndpointConfig:
        for kind, specs in (("input", self.inputs), ("output", self.outputs)):
            names = [spec.name for spec in specs]
            if twice := sorted({name for name in names if names.count(name) > 1}):
                raise ValueError(f"{kind} {shown(twice[0])} is declared twice: each {kind} name once")
        return self


class EndpointsFile(BaseModel):
    endpoints: dict[str, EndpointConfig] = Field(default_factory=dict)
    metrics: dict[str, EndpointMetrics] = Field(default_factory=dict)
    """Custom statistics declared per endpoint name (`serving metrics add`): for configured, deployed or built-in
    endpoints alike."""
    invalid: dict[str, str] = Field(default_factory=dict, exclude=True)
    """Entries that failed validation, with what to fix; the valid ones are still served."""
    rejected: dict[str, dict[str, Any]] = Field(default_factory=dict, exclude=True)
    """The invalid entries as the file has them, by section and name: written back unchanged, so a command that
    changes one entry never drops another one that a person is still fixing."""

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
        found: dict[str, dict] = {"endpoints": {}, "metrics": {}}
        invalid: dict[str, str] = {}
        rejected: dict[str, dict[str, Any]] = {}
        models: tuple[type[BaseModel], ...] = (EndpointConfig, EndpointMetrics)
        for section, model in zip(SECTIONS, models, strict=True):
            entries = raw.get(section, {})
            if not isinstance(entries, dict):
                raise ConfigurationError(f'endpoint file {path}: "{section}" must be an object keyed by endpoint name')
            for name, entry in entries.items():
                try:
                    found[section][name] = _entry(model, name, entry)
                except ValueError as problem:
                    invalid[_where(section, name)] = str(problem)
                    rejected.setdefault(section, {})[name] = entry
        return cls(**found, invalid=invalid, rejected=rejected)

    def preprocess_paths(self, base_dir: Path) -> list[Path]:
        """Every preprocess file or folder the endpoints name (a relative one is relative to `base_dir`)."""
        return [base_dir / config.preprocess for config in self.endpoints.values() if config.preprocess]

    def dump(self) -> str:
        sections = {
            "endpoints": {n: c.model_dump(exclude_defaults=True) for n, c in self.endpoints.items()},
            "metrics": {n: m.model_dump(exclude_defaults=True) for n, m in self.metrics.items()},
        }
        for section, entries in self.rejected.items():
            sections[section].update({n: e for n, e in entries.items() if n not in sections[section]})
        return json.dumps(sections, indent=2) + "\n"

    def write(self, path: Path) -> None:
        """Replace the whole file with this content (under the file's lock, atomically). A change to the file as
        it is now is `update`."""
        file = LockedFile(path)
        with file.locked():
            file.replace(self.dump())

    @classmethod
    def update(cls, path: Path, change: Callable[[EndpointsFile], T]) -> T:
        """Read the file, apply `change` (which may raise to abort: nothing is written) and write it back, under the
        file's lock: every confirmed change lands, however many commands run at once."""
        return LockedFile(path).update(lambda: cls.read(path), change, cls.dump)

    def remove(self, section: str, name: str) -> bool:
        """Take the entry `name` out of `section`, valid or not; False if there is none."""
        valid = self.endpoints if section == "endpoints" else self.metrics
        found = valid.pop(name, None) is not None or self.rejected.get(section, {}).pop(name, None) is not None
        self.invalid.pop(_where(section, name), None)
        return found


def _entry(model: type[BaseModel], name: str, entry: Any) -> Any:
    """One entry validated, or ValueError saying the field and what to fix."""
    if not is_valid_name(name):
        raise ValueError(f"the name is not valid: use {RULE}")
    try:
        return model.model_validate(entry)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or "(entry)"
        raise ValueError(f"field '{field}': {error['msg'].removeprefix('Value error, ')}") from None


def _where(section: str, name: str) -> str:
    """The key of an invalid entry in `invalid` (and in /health/ready's `config_errors`)."""
    return printable(name) if section == "endpoints" else f"metrics of {shown(name)}"

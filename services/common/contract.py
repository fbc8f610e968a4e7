"""The tensor contract: the model manifest written at export and read by every service and Triton config.

`manifest.json` sits next to `model.onnx` and `tokenizer.json`. It names the task, the input and output tensors
(Triton dtype names, -1 for dynamic axes, batch axis first), the maximum sequence length, the labels of a classifier
and the sha256 of every file: the lineage record of what is being served.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field, field_validator

from services.common.errors import ConfigurationError

MANIFEST_FILE = "manifest.json"
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
REFERENCE_FILE = "reference.json"
# What a model version is warmed up and checked with before it takes traffic (the gateway's built-in model, the
# controller's forward pass and its check through Triton): a short and a longer text, so two lengths are padded.
WARMUP_TEXTS = ["warm up", "the quick brown fox jumps over the lazy dog"]

# Triton / KServe v2 dtype names and their numpy types (BF16 has none).
NUMPY_DTYPES: dict[str, type] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}
# The numpy names clearml-serving's `--input-type` takes (int64, float32, ...), each for its Triton name; `bytes` too.
TRITON_NAMES: dict[str, str] = {np.dtype(t).name: name for name, t in NUMPY_DTYPES.items()} | {"bytes": "BYTES"}


def triton_dtype(text: str) -> str:
    """The Triton name of a dtype given by its Triton name (INT64, FP32; any case) or numpy name (int64, float32);
    ValueError naming the allowed ones otherwise."""
    if text.upper() in NUMPY_DTYPES:
        return text.upper()
    if text.lower() in TRITON_NAMES:
        return TRITON_NAMES[text.lower()]
    raise ValueError(
        f"dtype '{text}' is not a tensor type: use a Triton name ({', '.join(NUMPY_DTYPES)}) "
        f"or a numpy name ({', '.join(TRITON_NAMES)})"
    )


Task = Literal["embedding", "classification"]
# Endpoint names of well-known models; any other model's endpoint is its name in lower case (`Manifest.endpoint_name`).
SHORT_NAMES = {"all-MiniLM-L6-v2": "minilm"}


MAX_RANK = 32
"""Axes of a tensor at most (numpy's own limit)."""


class TensorSpec(BaseModel):
    name: str
    dtype: str = Field(description="Triton dtype name: INT64, FP32, BYTES, ... (numpy names are read as Triton's)")
    shape: list[int] = Field(description="Full shape including the batch axis; -1 marks a dynamic axis")

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, value: str) -> str:
        return triton_dtype(value)

    @field_validator("shape")
    @classmethod
    def _sane_shape(cls, value: list[int]) -> list[int]:
        """Sizes of 1 or more, -1 for a dynamic axis; at most numpy's 32 axes (the shape Triton and numpy take)."""
        if not 1 <= len(value) <= MAX_RANK:
            raise ValueError(f"a shape has 1 to {MAX_RANK} axes, got {len(value)}")
        if bad := [size for size in value if size == 0 or size < -1]:
            raise ValueError(f"axis sizes are 1 or more, or -1 for a dynamic axis; got {bad[0]} in {value}")
        return value

    @property
    def numpy_dtype(self) -> type:
        return NUMPY_DTYPES[self.dtype]

    @property
    def dims(self) -> list[int]:
        """Shape without the batch axis, as Triton's config.pbtxt writes it when max_batch_size > 0."""
        return self.shape[1:]


class SourceInfo(BaseModel):
    path: str
    package: str | None = None
    package_version: str | None = None
    files: dict[str, str] = Field(default_factory=dict, description="sha256 of the checkpoint's own files")


class BuildInfo(BaseModel):
    fingerprint: str
    created_at: str
    opset: int
    torch: str
    transformers: str
    onnx: str
    max_abs_diff: float = Field(description="largest |onnx - pytorch| on the validation sentences")


class Manifest(BaseModel):
    schema_version: int = 1
    name: str
    version: str = "1"
    task: Task
    max_seq_length: int
    pooling: str | None = None
    normalize: bool = False
    labels: list[str] | None = None
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    files: dict[str, str] = Field(default_factory=dict, description="sha256 of every artifact file")
    source: SourceInfo
    build: BuildInfo

    @property
    def output(self) -> TensorSpec:
        return self.outputs[0]

    @property
    def input_names(self) -> list[str]:
        return [spec.name for spec in self.inputs]

    @property
    def endpoint_name(self) -> str:
        """The endpoint a server names this model by unless told otherwise."""
        return SHORT_NAMES.get(self.name) or re.sub(r"[^a-z0-9._-]+", "-", self.name.lower()).strip("-") or "model"

    @property
    def output_dim(self) -> int:
        return self.output.shape[-1]

    @classmethod
    def load(cls, model_dir: Path | str) -> Manifest:
        path = Path(model_dir) / MANIFEST_FILE
        if not path.is_file():
            raise ConfigurationError(
                f"no model manifest at {path}: build the model first (`make model`, or `serving model build`)"
            )
        return cls.model_validate_json(path.read_text())

    def save(self, model_dir: Path) -> None:
        (model_dir / MANIFEST_FILE).write_text(json.dumps(self.model_dump(), indent=2) + "\n")

    def verify_files(self, model_dir: Path | str) -> None:
        """Raise if an artifact file is missing or differs from the hash recorded at export."""
        for name, digest in self.files.items():
            path = Path(model_dir) / name
            if not path.is_file():
                raise ConfigurationError(f"model artifact {path} is missing: rebuild with `make model`")
            if sha256_file(path) != digest:
                raise ConfigurationError(f"model artifact {path} does not match its manifest hash: rebuild it")


class Reference(BaseModel):
    """What the original (PyTorch) model answered for the export's validation texts, recorded at export time: the
    independent truth servers are checked against."""

    texts: list[str]
    outputs: list[list[float]]

    @classmethod
    def load(cls, model_dir: Path | str) -> Reference:
        return cls.model_validate_json((Path(model_dir) / REFERENCE_FILE).read_text())

    def save(self, model_dir: Path) -> None:
        (model_dir / REFERENCE_FILE).write_text(self.model_dump_json() + "\n")

    def output_of(self, text: str) -> np.ndarray:
        return np.asarray(self.outputs[self.texts.index(text)], dtype=np.float32)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()

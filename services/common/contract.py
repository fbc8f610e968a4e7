"""The tensor contract: the model manifest written at export and read by every service and Triton config.

`manifest.json` sits next to `model.onnx` and `tokenizer.json`. It names the task, the input and output tensors
(Triton dtype names, -1 for dynamic axes, batch axis first), the maximum sequence length, the labels of a classifier
and the sha256 of every file: the lineage record of what is being served.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from services.common.errors import ConfigurationError
from services.common.names import ARTIFACT_FILE_PATTERN, MODEL_NAME_PATTERN, TENSOR_NAME_PATTERN

MANIFEST_FILE = "manifest.json"
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
REFERENCE_FILE = "reference.json"
QUALITY_FILE = "quality.json"
"""A variant's quality report against its source (`serving model optimize`), sealed with its files."""
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
MAX_MANIFEST_BYTES = 1 << 20
"""A manifest larger than this is refused before it is parsed."""
MAX_SEQ_LENGTH = 1 << 16
MAX_LABELS = 100_000
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _matching(pattern: str, what: str) -> Callable[[str], str]:
    """A validator accepting `value` only where `pattern` matches it whole; the refusal says the rule, never the
    value (a value from outside may be long or carry control characters)."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(f"{what} must match {pattern}")
        return value

    return check


_tensor_name = _matching(TENSOR_NAME_PATTERN, "a tensor name")
_model_name = _matching(MODEL_NAME_PATTERN, "a model name")
_artifact_file = _matching(ARTIFACT_FILE_PATTERN, "a file of the artifact (a relative path inside it)")


class TensorSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    dtype: str = Field(description="Triton dtype name: INT64, FP32, BYTES, ... (numpy names are read as Triton's)")
    shape: list[int] = Field(description="Full shape including the batch axis; -1 marks a dynamic axis")

    @field_validator("name")
    @classmethod
    def _allowed_name(cls, value: str) -> str:
        return _tensor_name(value)

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


class OptimizationInfo(BaseModel):
    """How a variant was made from its source (`serving model optimize`) and how close it measured to it; the whole
    quality report is the sealed file `quality.json` beside it."""

    model_config = ConfigDict(extra="forbid")

    variant: Literal["int8", "fp16"]
    fingerprint: str
    created_at: str
    onnxruntime: str
    recipe: dict[str, str] = Field(default_factory=dict, max_length=32)
    source_manifest: str = Field(description="sha256 of the source's manifest.json", pattern=r"^[0-9a-f]{64}$")
    quality: dict[str, float] = Field(default_factory=dict, max_length=32)
    passed: bool = Field(description="whether the quality met the gate (False: written by the user's override)")


class Manifest(BaseModel):
    """Untrusted until loaded: every name is held to an allow-list (`services.common.names`), every file to a relative
    path inside the artifact, and the files a server runs (`MODEL_FILE`, `TOKENIZER_FILE`) must be listed with their
    hashes. Nothing in it names a file, backend or path that Triton uses."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    name: str
    version: str = Field("1", pattern=r"^[0-9]{1,18}$")
    task: Task
    max_seq_length: int = Field(ge=1, le=MAX_SEQ_LENGTH)
    pooling: Literal["mean", "cls", "max"] | None = None
    normalize: bool = False
    labels: list[Annotated[str, Field(max_length=256)]] | None = Field(None, max_length=MAX_LABELS)
    inputs: list[TensorSpec] = Field(min_length=1, max_length=64)
    outputs: list[TensorSpec] = Field(min_length=1, max_length=64)
    files: dict[str, str] = Field(default_factory=dict, description="sha256 of every artifact file", max_length=64)
    source: SourceInfo
    build: BuildInfo
    optimization: OptimizationInfo | None = Field(None, description="set on a variant of another build only")

    @field_validator("name")
    @classmethod
    def _allowed_name(cls, value: str) -> str:
        return _model_name(value)

    @field_validator("files")
    @classmethod
    def _files_inside(cls, value: dict[str, str]) -> dict[str, str]:
        for path, digest in value.items():
            _artifact_file(path)
            if path == MANIFEST_FILE:
                raise ValueError(f"{MANIFEST_FILE} cannot list itself")
            if not _SHA256.fullmatch(digest):
                raise ValueError("each file's hash is 64 lowercase hexadecimal digits (sha256)")
        return value

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
        """The manifest of `model_dir`, checked; ConfigurationError naming the field that breaks a rule."""
        path = Path(model_dir) / MANIFEST_FILE
        if not path.is_file():
            raise ConfigurationError(
                f"no model manifest at {path}: build the model first (`make model`, or `serving model build`)"
            )
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            raise ConfigurationError(f"{MANIFEST_FILE} is over {MAX_MANIFEST_BYTES} bytes: not a model manifest")
        try:
            return cls.model_validate_json(path.read_bytes())
        except ValidationError as exc:
            raise ConfigurationError(f"{MANIFEST_FILE} is not valid: {_fields(exc)}") from None

    def save(self, model_dir: Path) -> None:
        """Written as JSON; a build that is no variant has no `optimization` key (as before variants existed)."""
        document = self.model_dump(exclude={"optimization"} if self.optimization is None else None)
        (model_dir / MANIFEST_FILE).write_text(json.dumps(document, indent=2) + "\n")

    def verify_files(
        self, model_dir: Path | str, required: tuple[str, ...] = (MODEL_FILE, TOKENIZER_FILE), *, exact: bool = False
    ) -> None:
        """Raise if a file the servers run is not listed, or an artifact file is missing, is not a regular file inside
        `model_dir` (a link or a special file), or differs from the hash recorded at export; `exact`: also if
        `model_dir` holds a file the manifest does not seal. Messages name files relative to the artifact."""
        if unlisted := [name for name in required if name not in self.files]:
            raise ConfigurationError(f"the manifest lists no hash for {unlisted}: every file a server runs is sealed")
        if exact:
            present = {p.relative_to(model_dir).as_posix() for p in Path(model_dir).rglob("*") if not p.is_dir()}
            if unsealed := sorted(present - set(self.files) - {MANIFEST_FILE}):
                raise ConfigurationError(f"the artifact holds files its manifest does not seal: {unsealed[:5]}")
        for name, digest in self.files.items():
            path = Path(model_dir) / name
            if path.is_symlink() or not path.is_file():
                raise ConfigurationError(f"artifact file {name} is missing or not a regular file: rebuild the model")
            if sha256_file(path) != digest:
                raise ConfigurationError(f"artifact file {name} does not match its manifest hash: rebuild it")


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


def _fields(exc: ValidationError) -> str:
    """Each broken rule as `field: message`, without the offending value."""
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'document'}: {error['msg'].removeprefix('Value error, ')}"
        for error in exc.errors()[:5]
    )


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def checked_hashes(model_dir: Path) -> dict[str, str]:
    """What a copy the controller checked is known by: the hash of its manifest and of every file the manifest
    seals (recorded in the version's lineage as `artifacts`)."""
    return {MANIFEST_FILE: sha256_file(Path(model_dir) / MANIFEST_FILE), **Manifest.load(model_dir).files}


def verify_as_checked(model_dir: Path, recorded: dict[str, str] | None, what: str) -> None:
    """`model_dir`'s manifest is the one the controller checked (its hash as `recorded`, the lineage's `artifacts`),
    so files already verified against that manifest (`Manifest.verify_files`) are the bytes the controller checked.
    ConfigurationError otherwise, and when nothing was recorded (a copy nobody checked is not served)."""
    if not recorded or MANIFEST_FILE not in recorded:
        raise ConfigurationError(f"{what}: the controller recorded no hashes for it; it is served once checked")
    if sha256_file(Path(model_dir) / MANIFEST_FILE) != recorded[MANIFEST_FILE]:
        raise ConfigurationError(f"{what}: its {MANIFEST_FILE} is not the one the controller checked")

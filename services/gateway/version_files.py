"""The files a gateway needs of a deployed version (its manifest and tokenizer), wherever the gateway runs.

On one host the controller's copy is readable here, in its models directory (`GATEWAY_CONTROLLER_MODELS_DIR`) under
`<endpoint>/<version>/model`: found there by the names (`model_dirs`), never at the path the state's `model_dir` names.
A gateway on another host (no shared volume) fetches the two files from the registry instead, once, into its own
cache directory (`<cache>/<endpoint>/<version>`, joined by `within`); the tokenizer is checked against the manifest's
hash. The fetch is three calls of MLflow's REST API to its tracking server
(`MLFLOW_TRACKING_URI`, started with `--serve-artifacts`): the version's run, the run's artifact location, then each
file through the artifact proxy. Serving processes never import the MLflow package (its import alone costs
seconds and hundreds of MB; the layer contract in pyproject.toml forbids it), so this thin client stands in for it.
Gunicorn workers fetching the same version at once each download into their own temporary directory and the first rename
wins, so no worker ever reads a half-written file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Protocol

import httpx

from services.common import artifacts
from services.common.confined import within
from services.common.contract import MANIFEST_FILE, TOKENIZER_FILE, Manifest, sha256_file, verify_as_checked
from services.common.errors import ConfigurationError, NotFound, Unavailable
from services.lifecycle.deployments import VersionState
from services.lifecycle.model_dirs import artifact_dir

FILES = [MANIFEST_FILE, TOKENIZER_FILE]
ARTIFACT_PATH = "model"
"""Where a registered version's files are in its run's artifacts (`services.registry.mlflow_registry`)."""


class FilesRegistry(Protocol):
    def fetch_files(self, name: str, version: str, dest: Path, files: list[str]) -> Path:
        """Download `files` of the version's model artifact under `dest`; returns the directory holding them."""
        ...


class MlflowFiles:
    """`fetch_files` over MLflow's REST API (a tracking server with `--serve-artifacts`), with the checks and limits
    of `services.common.artifacts`."""

    def __init__(self, tracking_uri: str, timeout: float = 30.0):
        self.tracking_uri = tracking_uri.rstrip("/")
        self.api = self.tracking_uri + "/api/2.0"
        self.timeout = timeout

    def _get(self, path: str, **params: str) -> httpx.Response:
        try:
            response = httpx.get(f"{self.api}/{path}", params=params, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise Unavailable(f"the registry at {self.api} does not answer: {exc}", retry_after=5) from None
        if response.status_code == 404 or (response.status_code == 400 and "DOES_NOT_EXIST" in response.text):
            raise NotFound(f"the registry has no {path.split('/')[-1]} {params}")
        if not response.is_success:
            raise Unavailable(f"the registry answered {response.status_code} to {path}", retry_after=5)
        return response

    def fetch_files(self, name: str, version: str, dest: Path, files: list[str]) -> Path:
        found = self._get("mlflow/model-versions/get", name=name, version=version).json()["model_version"]
        root = self._get("mlflow/runs/get", run_id=found["run_id"]).json()["run"]["info"]["artifact_uri"]
        if not root.startswith(artifacts.PROXIED):
            raise ConfigurationError(
                f"version {version} of '{name}' keeps its artifacts at {root}, which this host cannot read: run the "
                "tracking server with --serve-artifacts, so that artifacts come through its proxy"
            )
        source = artifacts.source_for(root, self.tracking_uri, ARTIFACT_PATH)
        return artifacts.download(source, dest, artifacts.ArtifactLimits(), only=files)


def version_files(
    endpoint: str,
    record: VersionState,
    cache_dir: Path,
    *,
    registered_name: str | None = None,
    registry: FilesRegistry | None = None,
    tracking_uri: str | None = None,
    models_dir: Path | None = None,
) -> Path:
    """A directory holding `record`'s manifest and tokenizer: the controller's copy in `models_dir` when readable
    here, else a copy under `cache_dir/<endpoint>/<version>` (fetched from the registry when not there yet). The
    registered model is the one in the version's lineage, else `registered_name`, else the endpoint's name."""
    if models_dir is not None:
        local = artifact_dir(models_dir, endpoint, record.version)
        if all((local / name).is_file() for name in FILES):
            return local
    target = within(cache_dir, endpoint, record.version)
    recorded = record.lineage.get("artifacts")
    if _complete(target, recorded):
        return target
    name = record.lineage.get("registry", {}).get("name") or registered_name or endpoint
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{record.version}-", dir=target.parent))
    try:
        if registry is None:
            if not tracking_uri:
                raise ConfigurationError(
                    f"version {record.version} of endpoint '{endpoint}' is not in the controller's models directory "
                    f"on this host ({models_dir}), and no registry is set to fetch it from: set "
                    "GATEWAY_CONTROLLER_MODELS_DIR to the controller's CONTROLLER_MODELS_DIR, or MLFLOW_TRACKING_URI"
                )
            registry = MlflowFiles(tracking_uri)
        fetched = registry.fetch_files(name, record.version, staging, FILES)
        _check(fetched, f"version {record.version} of '{name}' from the registry", recorded)
        try:
            os.rename(fetched, target)
        except OSError:  # another worker got there first
            if not _complete(target, recorded):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _complete(directory: Path, recorded: dict[str, str] | None) -> bool:
    try:
        _check(directory, str(directory), recorded)
    except (ConfigurationError, ValueError, OSError):
        return False
    return True


def _check(directory: Path, what: str, recorded: dict[str, str] | None) -> None:
    """Both files present, the tokenizer the one the manifest was sealed with, and both the bytes the controller
    checked (`recorded`: the hashes in the version's lineage)."""
    manifest = Manifest.load(directory)
    if not (directory / TOKENIZER_FILE).is_file():
        raise ConfigurationError(f"{what} has no {TOKENIZER_FILE}")
    expected = manifest.files.get(TOKENIZER_FILE)
    if expected and sha256_file(directory / TOKENIZER_FILE) != expected:
        raise ConfigurationError(f"the tokenizer of {what} does not match its manifest's hash")
    verify_as_checked(directory, recorded, what)  # the tokenizer was verified against that manifest above

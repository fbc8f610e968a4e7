"""The MLflow adapter: build and register a checkpoint with its lineage, list and fetch versions, tag and promote
them, and read the lineage of a version back (run, parent pipeline run and its steps, data sets, artifact hashes).

`register` is `build` (the project's export) followed by `publish` (log the built directory and register it), so a
directory built elsewhere, or written by a test without torch, takes the same path into the registry."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import subprocess
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from services.common import artifacts
from services.common.contract import MANIFEST_FILE, QUALITY_FILE, Manifest, checked_hashes, sha256_file
from services.common.errors import ConfigurationError, InvalidInput, NotFound, Unavailable
from services.common.private import made_private, private_dir, private_file
from services.common.urls import shown_url
from services.registry.lineage import (
    DATASET_ARTIFACT_TAG,
    VARIANT_TAG,
    UiLinks,
    datasets,
    pipeline,
    variant_description,
    variant_lineage,
    variant_of,
)
from services.registry.settings import RegistrySettings
from services.registry.signature import log_signature

if TYPE_CHECKING:
    from mlflow.entities.model_registry import ModelVersion
    from mlflow.tracking.fluent import ActiveRun

log = logging.getLogger(__name__)
ARTIFACT_PATH = "model"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class DatasetRef:
    path: Path
    name: str | None = None
    version: str | None = None

    @property
    def digest(self) -> str:
        return sha256_file(self.path)[:16]


@dataclass
class RegistryVersion:
    name: str
    version: str
    run_id: str | None  # None: registered from a path, not from a run
    tags: dict[str, str] = field(default_factory=dict)


def run_of(found: ModelVersion, name: str) -> str:
    """The run a registered version's files were logged in; NotFound where it was registered from no run."""
    if not found.run_id:
        raise NotFound(
            f"version {found.version} of '{name}' was registered from no run, so it has no files to fetch: register "
            "a built model with `serving model register`"
        )
    return found.run_id


def name_filter(name: str) -> str:
    """MLflow's filter for the registered model `name`: the name quoted with whichever quote it does not hold (MLflow's
    filter strings have no escape: a quote inside would end the value, and what follows would be read as more
    clauses). A name holding both is refused, saying so."""
    for quote in ("'", '"'):
        if quote not in name:
            return f"name = {quote}{name}{quote}"
    raise InvalidInput("a registered model name holding both ' and \" cannot be searched in MLflow: rename it")


def code_revision() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


class ModelRegistry:
    def __init__(self, settings: RegistrySettings | None = None):
        import mlflow
        from mlflow import MlflowClient

        self.settings = settings or RegistrySettings()
        self.uri = self.settings.uri
        mlflow.set_tracking_uri(self.uri)
        mlflow.set_registry_uri(self.uri)
        self.mlflow = mlflow
        if not self.uri.startswith("sqlite:///"):
            self.client = MlflowClient(tracking_uri=self.uri, registry_uri=self.uri)
            return
        # The first use of an SQLite store creates its tables; two processes doing it at once (the controller
        # starting while a user registers) break MLflow's migration. One at a time, under a file lock. The store's
        # directory and files are its owner's only (SQLite gives its journal files the database's mode).
        database = Path(self.uri.removeprefix("sqlite:///"))
        private_dir(database.parent)
        private_file(database)
        with open(private_file(database.with_suffix(".lock")), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.client = MlflowClient(tracking_uri=self.uri, registry_uri=self.uri)
            self.client.search_experiments(max_results=1)
            self.client.search_registered_models(max_results=1)

    def experiment_id(self, name: str | None = None) -> str:
        name = name or self.settings.experiment
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        location = None
        if self.uri.startswith("sqlite:"):  # else the default `./mlruns` relative to wherever the command ran
            made_private(self.settings.artifact_root)
            location = self.settings.artifact_uri
        return self.client.create_experiment(name, artifact_location=location)

    def register(
        self, checkpoint: Path | None, name: str, *, dataset: DatasetRef | None = None, run_id: str | None = None
    ) -> dict:
        """Build `checkpoint` (default model when None), log it with its lineage and register a new version."""
        from services.modelbuild.export import build

        with tempfile.TemporaryDirectory() as tmp:
            model_dir = Path(tmp) / ARTIFACT_PATH
            build(model_dir, checkpoint)
            return self.publish(model_dir, name, dataset=dataset, run_id=run_id)

    def publish(
        self,
        model_dir: Path,
        name: str,
        *,
        dataset: DatasetRef | None = None,
        run_id: str | None = None,
        source_version: str | None = None,
    ) -> dict:
        """Log a built model directory (manifest, tokenizer, ONNX file) into a run with its lineage (checkpoint
        files, code revision, export options, data set) and its signature (`signature`), and register it as a new
        version of `name` whose source is that signature. A variant (`serving model optimize`) also logs its recipe,
        its quality as metrics and `quality/quality.json`, and names `source_version`, the version it was made
        from, in its tags and description."""
        manifest = Manifest.load(model_dir)
        variant_tags = variant_lineage(manifest, source_version)
        optimized = manifest.optimization if variant_tags else None
        run_name = f"optimize {name} {source_version} {optimized.variant}" if optimized is not None else None
        with self._run(run_id, run_name or f"register {name}") as run:
            self.mlflow.log_artifacts(str(model_dir), artifact_path=ARTIFACT_PATH)
            source = log_signature(self.mlflow, manifest, run.info.run_id)
            self.mlflow.log_dict(manifest.source.model_dump(), "lineage/checkpoint.json")
            self.mlflow.set_tags(
                {"code_revision": code_revision(), "model.task": manifest.task, "model.name": manifest.name}
            )
            build_options = manifest.build.model_dump(exclude={"fingerprint", "created_at"})
            self.mlflow.log_params({f"export.{k}": v for k, v in build_options.items()})
            if dataset is not None:
                self.log_dataset(dataset)
            if manifest.optimization is not None:
                self.mlflow.set_tags(variant_tags)
                self.mlflow.log_params({f"optimize.{k}": v for k, v in manifest.optimization.recipe.items()})
                self.mlflow.log_metrics({f"quality.{k}": v for k, v in manifest.optimization.quality.items()})
                if (model_dir / QUALITY_FILE).is_file():
                    self.mlflow.log_artifact(str(model_dir / QUALITY_FILE), artifact_path="quality")
            run_id = run.info.run_id
        if not self.client.search_registered_models(filter_string=name_filter(name)):
            self.client.create_registered_model(name)
        version = self.client.create_model_version(
            name,
            source=source,
            run_id=run_id,
            tags={
                "manifest.sha256": hashlib.sha256(manifest.model_dump_json().encode()).hexdigest()[:16],
                **variant_tags,
            },
            description=variant_description(manifest, source_version),
        )
        log.info("registered %s version %s (run %s)", name, version.version, run_id)
        return {"name": name, "version": str(version.version), "run_id": run_id}

    def _run(self, run_id: str | None, run_name: str) -> contextlib.AbstractContextManager[ActiveRun]:
        """The run to log into: `run_id` (already active, as in a pipeline step, or resumed), else a new run."""
        active = self.mlflow.active_run()
        if run_id and active is not None and active.info.run_id == run_id:
            return contextlib.nullcontext(active)
        if run_id:
            return self.mlflow.start_run(run_id=run_id)
        return self.mlflow.start_run(experiment_id=self.experiment_id(), run_name=run_name)

    def log_dataset(self, dataset: DatasetRef) -> None:
        """The data set as an MLflow dataset input of the active run (name, digest, source, version) and, up to
        `dataset_artifact_max_mb`, a copy of its file as an artifact of the run: the data set's own page in the UI,
        which the lineage links to (the source is a path on the machine that trained)."""
        from mlflow.data.dataset_source_registry import resolve_dataset_source
        from mlflow.data.meta_dataset import MetaDataset

        if not dataset.path.is_file():
            raise ConfigurationError(f"data set {dataset.path} does not exist")
        with warnings.catch_warnings():  # MLflow registers its local-file source twice and warns about it
            warnings.simplefilter("ignore", UserWarning)
            source = resolve_dataset_source(str(dataset.path.resolve()))
        # MLflow marks `Dataset.profile` abstract on a class that is no ABC: MetaDataset does not define it and is made
        entity = MetaDataset(source=source, name=dataset.name or dataset.path.stem, digest=dataset.digest)  # type: ignore[abstract]
        tags = {"version": dataset.version} if dataset.version else {}
        max_mb = self.settings.dataset_artifact_max_mb
        if max_mb and dataset.path.stat().st_size <= max_mb * 1e6:
            self.mlflow.log_artifact(str(dataset.path), artifact_path="datasets")
            tags[DATASET_ARTIFACT_TAG] = f"datasets/{dataset.path.name}"
        self.mlflow.log_input(entity, context="training", tags=tags or None)

    def ping(self, timeout: float = 5.0) -> None:
        """Raise Unavailable, naming the registry, unless its tracking server answers its health check (an embedded
        store always answers)."""
        if not self.uri.startswith(("http://", "https://")):
            return
        try:
            answer = httpx.get(f"{self.uri.rstrip('/')}/health", timeout=timeout)
        except httpx.HTTPError as exc:
            raise Unavailable(f"the registry at {shown_url(self.uri)} does not answer: {exc}", retry_after=5) from None
        if answer.status_code != 200:
            raise Unavailable(
                f"the registry at {shown_url(self.uri)} answered {answer.status_code} to its health check"
            )

    def versions(self, name: str) -> list[RegistryVersion]:
        found = self.client.search_model_versions(filter_string=name_filter(name))
        return sorted(
            (RegistryVersion(name, str(v.version), v.run_id, dict(v.tags or {})) for v in found),
            key=lambda v: int(v.version),
        )

    def fetch(self, name: str, version: str, dest: Path) -> Path:
        """Download the version's artifact (manifest, tokenizer, ONNX file) into `dest/model`; returns that
        directory. The checks and limits of `services.common.artifacts`: the artifact's own listing, relative paths,
        regular files, sizes stopped at the limit."""
        return self._download(name, version, Path(dest) / ARTIFACT_PATH, None)

    def fetch_files(self, name: str, version: str, dest: Path, files: list[str]) -> Path:
        """Download some of the version's artifact files (e.g. the manifest and the tokenizer a gateway needs, not
        the ONNX file) into `dest`, with the same checks; returns `dest`."""
        return self._download(name, version, Path(dest), files)

    def _download(self, name: str, version: str, dest: Path, only: list[str] | None) -> Path:
        try:
            found = self.client.get_model_version(name, version)
        except Exception as exc:  # noqa: BLE001 - MLflow raises its own exception types
            self.ping()  # the registry away is not a missing version
            raise NotFound(f"registry has no version {version} of '{name}': {exc}") from None
        artifact_uri = self.client.get_run(run_of(found, name)).info.artifact_uri
        tracking = self.uri if self.uri.startswith(("http://", "https://")) else None
        source = artifacts.source_for(artifact_uri, tracking, ARTIFACT_PATH)
        return artifacts.download(source, dest, self.settings.artifacts, only)

    def tag(self, name: str, version: str, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self.client.set_model_version_tag(name, version, key, str(value)[:5000])

    def promote(self, name: str, version: str, alias: str = "champion") -> None:
        self.client.set_registered_model_alias(name, alias, version)

    def lineage(self, name: str, version: str, model_dir: Path | None = None) -> dict:
        """Where a version came from (registry entry, run, pipeline and its steps, data sets, code revision, and the
        artifact hashes of `model_dir` when given), with links into the MLflow UI: the controller stores it with
        the deployed version, and `GET /models/{endpoint}` shows it."""
        found = self.client.get_model_version(name, version)
        run = self.client.get_run(run_of(found, name))
        links = UiLinks(self.settings.ui_url.rstrip("/"))
        lineage: dict[str, Any] = {
            "registry": {"name": name, "version": version, "url": links.version(name, version)},
            "run": {"id": run.info.run_id, "name": run.info.run_name, "url": links.run(run)},
            "code_revision": run.data.tags.get("code_revision"),
        }
        runs = [run]
        parent_id = run.data.tags.get("mlflow.parentRunId")
        if parent_id:
            parent = self.client.get_run(parent_id)
            experiments = list(dict.fromkeys([parent.info.experiment_id, run.info.experiment_id]))
            steps = self.client.search_runs(experiments, filter_string=f"tags.mlflow.parentRunId = '{parent_id}'")
            runs += [parent, *steps]
            experiment = self.client.get_experiment(parent.info.experiment_id).name
            lineage["pipeline"] = pipeline(parent, steps, experiment, links)
        lineage["datasets"] = datasets(runs, links)
        tags = dict(found.tags or {})
        if VARIANT_TAG in tags:
            lineage["variant"] = variant_of(name, tags, run.data.metrics, links)
        if model_dir is not None and (model_dir / MANIFEST_FILE).is_file():
            lineage["artifacts"] = checked_hashes(model_dir)
        return lineage

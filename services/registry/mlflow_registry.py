"""The MLflow adapter: register a built model with its lineage, list and fetch versions, tag and promote them,
and read the lineage of a version back (run, parent pipeline run and its steps, data sets, artifact hashes)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import subprocess
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from services.common.contract import MANIFEST_FILE, Manifest, sha256_file
from services.common.errors import ConfigurationError, NotFound
from services.registry.settings import RegistrySettings

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
    run_id: str
    tags: dict[str, str] = field(default_factory=dict)


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
        # starting while a user registers) break MLflow's migration. One at a time, under a file lock.
        database = Path(self.uri.removeprefix("sqlite:///"))
        database.parent.mkdir(parents=True, exist_ok=True)
        with open(database.with_suffix(".lock"), "a") as lock:
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
            self.settings.artifact_root.mkdir(parents=True, exist_ok=True)
            location = self.settings.artifact_uri
        return self.client.create_experiment(name, artifact_location=location)

    def register(
        self, checkpoint: Path | None, name: str, *, dataset: DatasetRef | None = None, run_id: str | None = None
    ) -> dict:
        """Build `checkpoint` (default model when None), log it with its lineage and register a new version."""
        from services.modelbuild.export import build

        with tempfile.TemporaryDirectory() as tmp:
            model_dir = Path(tmp) / ARTIFACT_PATH
            manifest = build(model_dir, checkpoint)
            with self._run(run_id, f"register {name}") as run:
                self.mlflow.log_artifacts(str(model_dir), artifact_path=ARTIFACT_PATH)
                self.mlflow.log_dict(manifest.source.model_dump(), "lineage/checkpoint.json")
                self.mlflow.set_tags(
                    {"code_revision": code_revision(), "model.task": manifest.task, "model.name": manifest.name}
                )
                self.mlflow.log_params(
                    {
                        f"export.{k}": v
                        for k, v in manifest.build.model_dump().items()
                        if k not in ("fingerprint", "created_at")
                    }
                )
                if dataset is not None:
                    self.log_dataset(dataset)
                run_id = run.info.run_id
        if not self.client.search_registered_models(filter_string=f"name = '{name}'"):
            self.client.create_registered_model(name)
        version = self.client.create_model_version(
            name,
            source=f"runs:/{run_id}/{ARTIFACT_PATH}",
            run_id=run_id,
            tags={"manifest.sha256": hashlib.sha256(manifest.model_dump_json().encode()).hexdigest()[:16]},
        )
        log.info("registered %s version %s (run %s)", name, version.version, run_id)
        return {"name": name, "version": str(version.version), "run_id": run_id}

    def _run(self, run_id: str | None, run_name: str):
        """The run to log into: `run_id` (already active, as in a pipeline step, or resumed), else a new run."""
        active = self.mlflow.active_run()
        if run_id and active is not None and active.info.run_id == run_id:
            return contextlib.nullcontext(active)
        if run_id:
            return self.mlflow.start_run(run_id=run_id)
        return self.mlflow.start_run(experiment_id=self.experiment_id(), run_name=run_name)

    def log_dataset(self, dataset: DatasetRef) -> None:
        """The data set as an MLflow dataset input of the active run: name, digest, source, version."""
        from mlflow.data.dataset_source_registry import resolve_dataset_source
        from mlflow.data.meta_dataset import MetaDataset

        if not dataset.path.is_file():
            raise ConfigurationError(f"data set {dataset.path} does not exist")
        with warnings.catch_warnings():  # MLflow registers its local-file source twice and warns about it
            warnings.simplefilter("ignore", UserWarning)
            source = resolve_dataset_source(str(dataset.path.resolve()))
        entity = MetaDataset(source=source, name=dataset.name or dataset.path.stem, digest=dataset.digest)
        tags = {"version": dataset.version} if dataset.version else None
        self.mlflow.log_input(entity, context="training", tags=tags)

    def versions(self, name: str) -> list[RegistryVersion]:
        found = self.client.search_model_versions(filter_string=f"name = '{name}'")
        return sorted(
            (RegistryVersion(name, str(v.version), v.run_id, dict(v.tags or {})) for v in found),
            key=lambda v: int(v.version),
        )

    def fetch(self, name: str, version: str, dest: Path) -> Path:
        """Download the version's artifacts (manifest, tokenizer, ONNX file) into `dest`."""
        try:
            found = self.client.get_model_version(name, version)
        except Exception as exc:  # noqa: BLE001 - MLflow raises its own exception types
            raise NotFound(f"registry has no version {version} of '{name}': {exc}") from None
        dest.mkdir(parents=True, exist_ok=True)
        path = self.mlflow.artifacts.download_artifacts(
            run_id=found.run_id, artifact_path=ARTIFACT_PATH, dst_path=str(dest), tracking_uri=self.uri
        )
        return Path(path)

    def tag(self, name: str, version: str, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self.client.set_model_version_tag(name, version, key, str(value)[:5000])

    def promote(self, name: str, version: str, alias: str = "champion") -> None:
        self.client.set_registered_model_alias(name, alias, version)

    def lineage(self, name: str, version: str, model_dir: Path | None = None) -> dict:
        """Where a version came from, for `GET /models/{endpoint}` and the controller's records."""
        found = self.client.get_model_version(name, version)
        run = self.client.get_run(found.run_id)
        ui = self.settings.ui_url.rstrip("/")
        experiment = run.info.experiment_id
        parent_id = run.data.tags.get("mlflow.parentRunId")
        runs = [run]
        lineage = {
            "registry": {"name": name, "version": version, "url": f"{ui}/#/models/{name}/versions/{version}"},
            "run": {
                "id": run.info.run_id,
                "name": run.info.run_name,
                "url": f"{ui}/#/experiments/{experiment}/runs/{run.info.run_id}",
            },
            "code_revision": run.data.tags.get("code_revision"),
        }
        if parent_id:
            parent = self.client.get_run(parent_id)
            steps = self.client.search_runs([experiment], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'")
            runs += [parent, *steps]
            lineage["pipeline"] = {
                "id": parent_id,
                "name": parent.info.run_name,
                "url": f"{ui}/#/experiments/{experiment}/runs/{parent_id}",
                "steps": sorted(
                    (
                        {
                            "name": s.info.run_name,
                            "id": s.info.run_id,
                            "url": f"{ui}/#/experiments/{experiment}/runs/{s.info.run_id}",
                        }
                        for s in steps
                    ),
                    key=lambda s: s["name"] or "",
                ),
            }
        datasets = {}
        for item in runs:
            for dataset_input in item.inputs.dataset_inputs if item.inputs else []:
                entity = dataset_input.dataset
                tags = {t.key: t.value for t in dataset_input.tags}
                datasets[entity.digest] = {
                    "name": entity.name,
                    "digest": entity.digest,
                    "version": tags.get("version"),
                    "source": json.loads(entity.source).get("uri", entity.source)
                    if entity.source.startswith("{")
                    else entity.source,
                }
        lineage["datasets"] = list(datasets.values())
        if model_dir is not None and (model_dir / MANIFEST_FILE).is_file():
            lineage["artifacts"] = Manifest.load(model_dir).files
        return lineage

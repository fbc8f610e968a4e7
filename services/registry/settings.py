"""Registry settings: where MLflow keeps runs, artifacts and registered models.

Built when a registry is opened (the commands, the controller), never at import: the run directory comes from
SERVING_RUN_DIR at that moment, like every other entry point's `RunSettings`."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.common.artifacts import ArtifactLimits


class RegistrySettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="REGISTRY_",
        extra="ignore",
        populate_by_name=True,
        env_nested_delimiter="__",
        use_attribute_docstrings=True,
    )

    run_dir: Path = Field(Path("run"), validation_alias="SERVING_RUN_DIR")
    """The run directory (`SERVING_RUN_DIR`), home of the embedded store by default."""
    tracking_uri: str | None = Field(
        None, validation_alias=AliasChoices("MLFLOW_TRACKING_URI", "REGISTRY_TRACKING_URI")
    )
    """MLflow tracking and registry URI; default: an SQLite store in the run directory (no server to start)."""
    artifact_root: Path = Field(default_factory=lambda data: data["run_dir"] / "mlflow" / "artifacts")
    """Where the embedded store keeps artifacts (a tracking server decides its own); default: run/mlflow/artifacts."""
    ui_url: str = "http://127.0.0.1:5000"
    """The MLflow UI (`make registry`) that lineage links point to."""
    experiment: str = "transformer-serving"
    """Experiment of the runs `serving model register` and `serving train` create."""
    dataset_artifact_max_mb: float = Field(100.0, ge=0)
    """A logged data set file up to this size is also kept as an artifact of its run, the page its lineage links
    to; a larger one is linked to its run's page instead (0: never copied)."""
    artifacts: ArtifactLimits = ArtifactLimits()
    """What a fetch of a version takes at most (`REGISTRY_ARTIFACTS__MAX_FILE_BYTES`, ...): stopped at the limit."""

    @property
    def uri(self) -> str:
        return self.tracking_uri or f"sqlite:///{(self.run_dir / 'mlflow' / 'mlflow.db').resolve()}"

    @property
    def artifact_uri(self) -> str:
        return self.artifact_root.resolve().as_uri()

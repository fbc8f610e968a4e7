"""Registry settings: where MLflow keeps runs, artifacts and registered models."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.launcher import RUN_DIR


class RegistrySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="REGISTRY_", extra="ignore", populate_by_name=True)

    tracking_uri: str | None = Field(
        None, validation_alias=AliasChoices("MLFLOW_TRACKING_URI", "REGISTRY_TRACKING_URI")
    )
    """MLflow tracking and registry URI; default: an SQLite store in the run directory (no server to start)."""
    artifact_root: Path = Field(default_factory=lambda: RUN_DIR / "mlflow" / "artifacts")
    """Where the embedded store keeps artifacts (a tracking server decides its own)."""
    ui_url: str = "http://127.0.0.1:5000"
    """The MLflow UI (`make registry`) that lineage links point to."""
    experiment: str = "transformer-serving"
    """Experiment of the runs `serving model register` creates."""

    @property
    def uri(self) -> str:
        return self.tracking_uri or f"sqlite:///{(RUN_DIR / 'mlflow' / 'mlflow.db').resolve()}"

    @property
    def artifact_uri(self) -> str:
        return self.artifact_root.resolve().as_uri()

"""Where the registry keeps its store, read when the settings are built; the MLflow UI process over that store."""

from __future__ import annotations

from pathlib import Path

from services.registry.settings import RegistrySettings
from services.registry.ui import ui_process


def test_the_store_follows_the_run_directory_read_when_built(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("SERVING_RUN_DIR", str(tmp_path / "elsewhere"))
    settings = RegistrySettings()
    assert settings.run_dir == tmp_path / "elsewhere"
    assert settings.artifact_root == tmp_path / "elsewhere" / "mlflow" / "artifacts"
    assert settings.uri == f"sqlite:///{tmp_path / 'elsewhere' / 'mlflow' / 'mlflow.db'}"
    monkeypatch.delenv("SERVING_RUN_DIR")
    assert RegistrySettings().run_dir == Path("run")


def test_registry_variables_override_the_defaults(monkeypatch, tmp_path):
    monkeypatch.setenv("SERVING_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    monkeypatch.setenv("REGISTRY_ARTIFACT_ROOT", str(tmp_path / "artifacts"))
    monkeypatch.setenv("REGISTRY_UI_URL", "http://ui:5000")
    monkeypatch.setenv("REGISTRY_EXPERIMENT", "exp")
    settings = RegistrySettings()
    assert (settings.uri, settings.artifact_root, settings.ui_url, settings.experiment) == (
        "http://mlflow:5000",
        tmp_path / "artifacts",
        "http://ui:5000",
        "exp",
    )
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.setenv("REGISTRY_TRACKING_URI", "http://other:5000")
    assert RegistrySettings().uri == "http://other:5000"


def test_the_ui_serves_the_embedded_store_and_its_artifacts(tmp_path):
    settings = RegistrySettings(run_dir=tmp_path, tracking_uri=None)
    spec = ui_process(settings, "127.0.0.1", 5099)
    argv = spec.argv
    assert Path(argv[0]).name == "mlflow" and argv[1] == "server"
    assert spec.env["MLFLOW_BACKEND_STORE_URI"] == settings.uri and settings.uri not in argv, "not on the command line"
    assert argv[argv.index("--default-artifact-root") + 1] == settings.artifact_uri
    assert (spec.ports, spec.ready_url) == ([5099], "http://127.0.0.1:5099/health")
    assert spec.env == {
        "MLFLOW_BACKEND_STORE_URI": settings.uri,
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    }, "the store's URI in the environment; no job runner and huey consumers to stop"


def test_a_tracking_server_keeps_its_own_artifacts(tmp_path):
    spec = ui_process(RegistrySettings(run_dir=tmp_path, tracking_uri="http://mlflow:5000"), "0.0.0.0", 5000)
    assert "--default-artifact-root" not in spec.argv

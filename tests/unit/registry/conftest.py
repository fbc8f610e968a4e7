"""One real embedded MLflow store (SQLite and artifacts under a temporary run directory, no server) for the
registry's unit tests: creating it and importing MLflow take seconds, so these tests share one."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.registry.settings import RegistrySettings

UI = "http://mlflow.test:5000"
VIEW = "?workflowType=machine_learning"
"""The query of every link: the UI's "Model training" view."""


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    from services.registry.mlflow_registry import ModelRegistry

    run_dir = tmp_path_factory.mktemp("run")
    return ModelRegistry(RegistrySettings(run_dir=run_dir, tracking_uri=None, ui_url=UI))


@pytest.fixture(scope="session")
def dataset_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "reviews.csv"
    path.write_text("text,label\ngreat,positive\nawful,negative\n")
    return path


@pytest.fixture(autouse=True)
def registry_uris(request):
    """MLflow's process-wide URIs pointed at the session's store again before each test that uses it: any other
    `ModelRegistry` built in this process since (another test file in the same test process) moved them, and the
    fluent API (`mlflow.start_run`, which the pipeline uses) follows them."""
    if "registry" in request.fixturenames:
        registry = request.getfixturevalue("registry")
        registry.mlflow.set_tracking_uri(registry.uri)
        registry.mlflow.set_registry_uri(registry.uri)

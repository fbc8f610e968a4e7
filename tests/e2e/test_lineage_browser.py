"""Every link of a version's lineage (`GET /models/{endpoint}`) opened in a real browser: headless Chromium over the
MLflow UI that `serving registry` starts, after `serving train`'s pipeline fine-tuned the tiny checkpoint. Each page
must be the right one: its run, model and data set named in its text, under the pipeline's experiment (the UI's
sidebar names the experiment an address points to, whatever experiment the run is in), the steps nested under the
pipeline's run. A screenshot of each page is kept under the test's tmp_path.

Measured 2.5-4 min on 2 cores shared with other test runs (load average 10-13): the MLflow UI's start (45-55 s on
its own) overlapped with the pipeline (40-110 s), then 8 pages at 2-30 s each. Marked `browser`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from services.launcher import free_port
from tests.support.browser import Browser
from tests.support.servers import processes_mentioning

SERVING = str(Path(sys.executable).parent / "serving")
MODEL = "tiny-sentiment"
EXPERIMENT = "transformer-serving"
FIRST_ROW = "This movie was terrible."  # the shipped data set's first sentence
EXPAND = 'button[data-component-id*="runnamecellrenderer"]'  # the runs table's +/- beside a parent run's name

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def lineage(tmp_path_factory) -> dict:
    """The pipeline's lineage (what the controller stores and `/models/{endpoint}` returns) with its links pointing
    at a live MLflow UI; the UI is stopped (`serving down`) after the module."""
    from services.modelbuild.tiny import write_tiny_checkpoint
    from services.registry.mlflow_registry import ModelRegistry
    from services.registry.settings import RegistrySettings
    from services.registry.train import run_pipeline

    run_dir = tmp_path_factory.mktemp("lineage") / "run"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"} | {"SERVING_RUN_DIR": str(run_dir)}
    started = time.monotonic()
    ui = subprocess.Popen(
        [SERVING, "registry", "--port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        registry = ModelRegistry(
            RegistrySettings(run_dir=run_dir, tracking_uri=None, ui_url=f"http://127.0.0.1:{port}")
        )
        base = write_tiny_checkpoint(run_dir.parent / "tiny", task="classification", max_length=128)
        trained = run_pipeline(MODEL, epochs=1, registry=registry, base=base)
        print(f"\npipeline on the tiny checkpoint: {time.monotonic() - started:.1f} s")
        _, errors = ui.communicate(timeout=150)
        assert ui.returncode == 0, errors
        print(f"MLflow UI ready: {time.monotonic() - started:.1f} s after its start")
        yield registry.lineage(MODEL, trained["version"])
    finally:
        if ui.poll() is None:
            ui.kill()
        subprocess.run([SERVING, "down"], env=env, capture_output=True, timeout=60)
        assert processes_mentioning(str(run_dir)) == [], "the MLflow UI is stopped"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    browser = Browser(tmp_path_factory.mktemp("browser"))
    yield browser
    browser.close()


def open_page(browser: Browser, url: str, expect: list[str], shot: Path) -> tuple[str, str]:
    """The page's text and its sidebar's (the experiment the address is under), after it shows `expect`."""
    started = time.monotonic()
    text = browser.open(url, expect, shot)
    print(f"{url}\n  {time.monotonic() - started:.1f} s, screenshot {shot}")
    missing = [item for item in expect if item not in text]
    assert not missing, f"{url} does not show {missing}; it shows:\n{text[:3000]}"
    return text, browser.text("aside")


def test_every_run_link_opens_that_run_under_the_pipelines_experiment(lineage, browser, tmp_path):
    pipeline = lineage["pipeline"]
    steps = {step["id"]: step for step in pipeline["steps"]}
    assert lineage["run"]["id"] in steps, "the version's run is the pipeline's register step"
    assert steps[lineage["run"]["id"]]["url"] == lineage["run"]["url"]
    for index, run in enumerate([pipeline, *pipeline["steps"]]):
        expect = [run["name"], f"Run ID\n{run['id']}"]
        if run is pipeline:  # the child runs' names arrive after the page
            expect += ["Child runs", *(step["name"] for step in pipeline["steps"])]
        else:
            expect += [f"Parent run\n{pipeline['name']}"]
        text, sidebar = open_page(browser, run["url"], expect, tmp_path / f"run-{index}.png")
        assert EXPERIMENT in sidebar.splitlines() and "Default" not in sidebar, (
            f"{run['url']} is under another experiment"
        )
        if run is pipeline:
            children = text.split("Child runs\n", 1)[1].split("\nSource", 1)[0]
            assert sorted(c.strip(" ,") for c in children.splitlines()) == [s["name"] for s in pipeline["steps"]]
        if run["id"] == lineage["run"]["id"]:
            dataset = lineage["datasets"][0]
            assert f"{dataset['name']} ({dataset['digest']})" in text, "the version's run lists its data set"
            assert f"Registered models\n{MODEL}" in text


def test_the_experiment_shows_the_steps_nested_under_the_pipeline(lineage, browser, tmp_path):
    pipeline = lineage["pipeline"]
    assert pipeline["experiment"]["name"] == EXPERIMENT
    expect = [pipeline["name"], "5 matching runs"]
    text, sidebar = open_page(browser, pipeline["experiment"]["url"], expect, tmp_path / "experiment.png")
    assert EXPERIMENT in sidebar.splitlines()
    steps = [step["name"] for step in pipeline["steps"]]
    assert [name for name in steps if name in text] == [], "the steps are rows of their own, not nested"
    browser.click(EXPAND)
    text = browser.show(steps, tmp_path / "experiment-expanded.png")
    print(f"  expanded: {tmp_path / 'experiment-expanded.png'}")
    rows = [line for line in text.splitlines() if line in [pipeline["name"], *steps]]
    assert rows == [pipeline["name"], *sorted(steps, reverse=True)], "the steps under the pipeline, newest first"


def test_the_version_link_opens_the_version_its_source_run_and_its_tensor_contract(lineage, browser, tmp_path):
    """The version's page shows its schema: the manifest's inputs and outputs (MLflow reads them from the MLmodel
    file at the version's source), not `Inputs (0)`."""
    from mlflow import MlflowClient

    from services.common.contract import Manifest

    client = MlflowClient()  # the pipeline's store: `ModelRegistry` set it as the tracking and registry URI
    manifest = Manifest.load(
        Path(client.download_artifacts(lineage["run"]["id"], "model/manifest.json", str(tmp_path))).parent
    )
    registry = lineage["registry"]
    schema = [f"Inputs ({len(manifest.inputs)})", f"Outputs ({len(manifest.outputs)})"]
    tensors = [  # as the UI lists each tensor: name, then its dtype and shape
        f"{t.name} (required)\nTensor (dtype: {np.dtype(t.numpy_dtype).name}, shape: [{','.join(map(str, t.shape))}])"
        for t in manifest.inputs + manifest.outputs
    ]
    expect = [MODEL, f"Version {registry['version']}", f"Source Run\n:\n{lineage['run']['name']}", *schema]
    open_page(browser, registry["url"], expect, tmp_path / "version.png")
    for section in schema:
        browser.click_text(section)
    text = browser.show(tensors, tmp_path / "version-schema.png")
    print(f"  schema expanded: {tmp_path / 'version-schema.png'}")
    assert [tensor for tensor in tensors if tensor not in text] == [], text


def test_the_data_set_link_opens_the_data(lineage, browser, tmp_path):
    [dataset] = lineage["datasets"]
    assert dataset["name"] == "sentiment" and "/artifacts/datasets/sentiment.csv?" in dataset["url"]
    text, sidebar = open_page(browser, dataset["url"], ["datasets/sentiment.csv", FIRST_ROW], tmp_path / "data.png")
    assert "Previewing the first 400 rows" in text
    assert EXPERIMENT in sidebar.splitlines()

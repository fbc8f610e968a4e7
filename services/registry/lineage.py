"""Reading a version's lineage out of MLflow's entities: the pipeline run it was registered under with its steps,
the data sets logged on any of them, and links to each in the MLflow UI. Pure functions over the runs the adapter
fetched (`ModelRegistry.lineage`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from mlflow.entities import Run

    from services.common.contract import Manifest

DATASET_ARTIFACT_TAG = "artifact"
VARIANT_TAG = "variant"
"""Tag of a version made by `serving model optimize`: int8 or fp16; `SOURCE_TAG` names the version it was made from."""
SOURCE_TAG = "source.version"

"""Tag of a dataset input naming the artifact (of the same run) that holds a copy of the data set's file."""


TRAINING_VIEW = "?workflowType=machine_learning"
"""MLflow 3's UI opens in its GenAI view unless told otherwise (a per-browser preference), where a training run's
page sits under "Evaluations"; this query opens its "Model training" view, where runs, models and the registry are."""


@dataclass(frozen=True)
class UiLinks:
    """Addresses of registry pages in the MLflow UI (its hash routes). A run's page is under the run's own
    experiment: the UI shows the experiment the address names, so another experiment's id opens the run under the
    wrong experiment (MLflow's Default, for one)."""

    ui: str

    def run(self, run: Run, artifact: str | None = None) -> str:
        page = f"/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
        return self._page(f"{page}/artifacts/{quote(artifact)}" if artifact else page)

    def experiment(self, experiment_id: str) -> str:
        """The experiment's runs table, where a pipeline's step runs are nested under its parent run."""
        return self._page(f"/experiments/{experiment_id}/runs")

    def version(self, name: str, version: str) -> str:
        return self._page(f"/models/{quote(name, safe='')}/versions/{version}")

    def _page(self, route: str) -> str:
        return f"{self.ui}/#{route}{TRAINING_VIEW}"


def pipeline(parent: Run, steps: list, experiment_name: str, links: UiLinks) -> dict:
    """The parent run a version was registered under (`serving train`), its experiment, and its step runs in
    step-name order."""
    return {
        "id": parent.info.run_id,
        "name": parent.info.run_name,
        "url": links.run(parent),
        "experiment": {
            "id": parent.info.experiment_id,
            "name": experiment_name,
            "url": links.experiment(parent.info.experiment_id),
        },
        "steps": sorted(
            ({"name": s.info.run_name, "id": s.info.run_id, "url": links.run(s)} for s in steps),
            key=lambda s: s["name"] or "",
        ),
    }


def datasets(runs: list, links: UiLinks) -> list[dict]:
    """The data set inputs logged on any of `runs`, once per digest, as the first run in `runs` that logged it
    records them. The link opens the copy of the data set's file that run keeps as an artifact (the UI previews it
    as a table), or, without a copy, the run's page (which lists its data sets)."""
    found = {}
    for item in runs:
        for dataset_input in item.inputs.dataset_inputs if item.inputs else []:
            entity = dataset_input.dataset
            if entity.digest in found:
                continue
            tags = {t.key: t.value for t in dataset_input.tags}
            source = (
                json.loads(entity.source).get("uri", entity.source) if entity.source.startswith("{") else entity.source
            )
            found[entity.digest] = {
                "name": entity.name,
                "digest": entity.digest,
                "version": tags.get("version"),
                "source": source,
                "run_id": item.info.run_id,
                "url": links.run(item, tags.get(DATASET_ARTIFACT_TAG)),
            }
    return list(found.values())


def variant_lineage(manifest: Manifest, source_version: str | None) -> dict[str, str]:
    """The tags of a variant's run and version (empty for a build that is no variant): what it is, the version it was
    made from, and whether it passed its quality gate."""
    info = manifest.optimization
    if info is None:
        return {}
    tags = {VARIANT_TAG: info.variant, "quality.passed": str(info.passed).lower()}
    if source_version is not None:
        tags[SOURCE_TAG] = source_version
    return tags


def variant_description(manifest: Manifest, source_version: str | None) -> str | None:
    """The version's description on its registry page: what it was made from and how close it measured."""
    info = manifest.optimization
    if info is None:
        return None
    made_from = f"version {source_version}" if source_version else "a local build"
    figures = ", ".join(f"{k} {v:.4f}" for k, v in info.quality.items())
    verdict = "passed the gate" if info.passed else "BELOW the gate (written by --allow-below-gate)"
    return f"{info.variant} variant of {made_from} (onnxruntime {info.onnxruntime}); quality: {figures}; {verdict}."


def variant_of(name: str, tags: dict[str, str], metrics: dict[str, float], links: UiLinks) -> dict:
    """A variant version's lineage entry: the version it was made from (with its page) and its quality figures."""
    source = tags.get(SOURCE_TAG)
    return {
        "variant": tags[VARIANT_TAG],
        "source": {"name": name, "version": source, "url": links.version(name, source)} if source else None,
        "quality": {k.removeprefix("quality."): v for k, v in sorted(metrics.items()) if k.startswith("quality.")},
        "passed": tags.get("quality.passed") == "true",
    }

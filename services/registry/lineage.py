"""Reading a version's lineage out of MLflow's entities: the pipeline run it was registered under with its steps,
the data sets logged on any of them, and links to each in the MLflow UI. Pure functions over the runs the adapter
fetched (`ModelRegistry.lineage`)."""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class UiLinks:
    """Addresses of registry pages in the MLflow UI (its hash routes); a run's page is under its own experiment."""

    ui: str

    def run(self, run) -> str:
        return f"{self.ui}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"

    def version(self, name: str, version: str) -> str:
        return f"{self.ui}/#/models/{name}/versions/{version}"


def pipeline(parent, steps: list, links: UiLinks) -> dict:
    """The parent run a version was registered under (`serving train`) and its step runs, in step-name order."""
    return {
        "id": parent.info.run_id,
        "name": parent.info.run_name,
        "url": links.run(parent),
        "steps": sorted(
            ({"name": s.info.run_name, "id": s.info.run_id, "url": links.run(s)} for s in steps),
            key=lambda s: s["name"] or "",
        ),
    }


def datasets(runs: list) -> list[dict]:
    """The data set inputs logged on any of `runs`, once per digest."""
    datasets = {}
    for item in runs:
        for dataset_input in item.inputs.dataset_inputs if item.inputs else []:
            entity = dataset_input.dataset
            tags = {t.key: t.value for t in dataset_input.tags}
            source = (
                json.loads(entity.source).get("uri", entity.source) if entity.source.startswith("{") else entity.source
            )
            datasets[entity.digest] = {
                "name": entity.name,
                "digest": entity.digest,
                "version": tags.get("version"),
                "source": source,
            }
    return list(datasets.values())

"""examples/: every example runs as its README shows it, and answers what its model answers in-process.

One stack for the module: a real Triton serving the tiny model's encoder and the gateway (two workers) in front of
it, on free ports, with its endpoint file in a workspace laid out like the repository: examples/ copied there (the
models the examples train stay out of the checkout), .venv linked, build/model linked to the tiny model (standing for
`make model`'s export). Each README's shell blocks run there as written (`tests.support.readmes`: only the ports
change): the train script, `.venv/bin/serving endpoints add ...`, curl and the answer shown. The five independent
examples run at once (the endpoint file's lock keeps their `serving endpoints add` commands from losing each
other's change); then the pipeline, which asks two of them.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from services.gateway.endpoints import EndpointConfig, EndpointsFile
from services.gateway.model_files import skops_io
from services.triton.repository import RenderOptions
from tests.support.docblocks import REPO, blocks, problems_of
from tests.support.models import reference_outputs
from tests.support.readmes import ReadmeRun, commands_not_run, run_readme
from tests.support.servers import Server, start_gateway, start_triton

EXAMPLES = REPO / "examples"
INDEPENDENT = ("sklearn", "xgboost", "lightgbm", "custom", "triton")
TRAINED = ("*.skops", "xgb-model.json", "lgbm-model.txt")
ENDPOINTS = Path("run") / "endpoints.json"
"""The endpoint file `serving endpoints` writes by default, from the workspace (SERVING_RUN_DIR unset: ./run)."""
IRIS = {0: [5.1, 3.5, 1.4, 0.2], 1: [7.0, 3.2, 4.7, 1.4], 2: [6.3, 3.3, 6.0, 2.5]}
"""One flower of each species (the iris data's rows 0, 50 and 100), by species."""


def flower(row: list[float]) -> dict:
    return {f"x{i}": value for i, value in enumerate(row)}


@dataclass
class Examples:
    workspace: Path
    gateway: Server
    runs: dict[str, ReadmeRun]

    def ran(self, name: str) -> ReadmeRun:
        run = self.runs[name]
        print(f"\nexamples/{name}/README.md: {'passed' if run.failure is None else 'FAILED'} in {run.seconds:.1f} s")
        assert run.failure is None, run.failure
        return run

    def model_file(self, name: str) -> str:
        return str(self.workspace / "examples" / name)

    def post(self, endpoint: str, body: dict) -> dict:
        response = httpx.post(f"{self.gateway.url}/serve/{endpoint}", json=body, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture(scope="module")
def examples(tmp_path_factory, tiny_model):
    base = tmp_path_factory.mktemp("examples")
    triton = start_triton(base / "triton", tiny_model, RenderOptions(batching=True), models=("encoder",))
    workspace = base / "repository"
    workspace.mkdir()
    shutil.copytree(EXAMPLES, workspace / "examples", ignore=shutil.ignore_patterns("__pycache__", *TRAINED))
    (workspace / ".venv").symlink_to(REPO / ".venv")
    (workspace / "build").mkdir()
    (workspace / "build" / "model").symlink_to(tiny_model)
    # the endpoint file the READMEs' `serving endpoints` commands write: the default run directory's
    gateway = start_gateway(workspace, tiny_model, triton, env={"GATEWAY_ENDPOINTS_FILE": str(workspace / ENDPOINTS)})
    ports = {
        "localhost:8080": gateway.url.removeprefix("http://"),
        "localhost:8000": triton.http_url.removeprefix("http://"),
    }

    def run(name: str) -> ReadmeRun:
        return run_readme(EXAMPLES / name / "README.md", workspace, ports, base / "out" / name)

    try:
        started = time.monotonic()
        with ThreadPoolExecutor(len(INDEPENDENT)) as pool:
            runs = dict(zip(INDEPENDENT, pool.map(run, INDEPENDENT), strict=True))
        runs["custom_async"] = run("custom_async")
        print(f"\nthe six examples' READMEs ran in {time.monotonic() - started:.1f} s")
        yield Examples(workspace, gateway, runs)
    finally:
        gateway.launcher.stop_all()
        triton.stop()


def test_every_example_has_a_readme_and_the_index_lists_it():
    folders = sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    assert folders == sorted([*INDEPENDENT, "custom_async"])
    index = (EXAMPLES / "README.md").read_text()
    assert all(f"]({name}/README.md)" in index for name in folders)
    readmes = [EXAMPLES / "README.md", *(EXAMPLES / name / "README.md" for name in folders)]
    assert [problem for readme in readmes for block in blocks(readme) for problem in problems_of(block)] == []


def test_sklearn_engine_predicts_with_the_trained_model(examples):
    run = examples.ran("sklearn")
    assert run.outputs[0] == {"y": [2]}
    assert "x2, x3 missing" in run.outputs[1]["error"]["message"]
    model = skops_io().load(examples.model_file("sklearn/sklearn-model.skops"))
    for species, row in IRIS.items():
        assert examples.post("iris-sklearn", flower(row)) == {"y": model.predict([row]).tolist()} == {"y": [species]}
    assert EndpointsFile.read(examples.workspace / ENDPOINTS).endpoints["iris-sklearn"].engine == "sklearn"


def test_xgboost_engine_predicts_on_the_preprocess_dmatrix(examples):
    import xgboost as xgb

    examples.ran("xgboost")
    booster = xgb.Booster()
    booster.load_model(examples.model_file("xgboost/xgb-model.json"))
    for species, row in IRIS.items():
        expected = booster.predict(xgb.DMatrix([row]))
        answer = examples.post("iris-xgboost", flower(row))
        assert answer["y"] == [species] == expected.argmax(axis=1).tolist()
        assert answer["probability"] == expected.max(axis=1).astype(float).round(3).tolist(), (
            "rounded as the README shows it"
        )


def test_lightgbm_engine_predicts_with_the_trained_booster(examples):
    import lightgbm as lgb

    examples.ran("lightgbm")
    booster = lgb.Booster(model_file=examples.model_file("lightgbm/lgbm-model.txt"))
    for species, row in IRIS.items():
        expected = booster.predict(np.array([row])).argmax(axis=1).tolist()
        assert examples.post("iris-lightgbm", flower(row)) == {"y": expected} == {"y": [species]}


def test_custom_engine_runs_the_model_its_load_read(examples):
    examples.ran("custom")
    model = skops_io().load(examples.model_file("custom/custom-model.skops"), trusted=["sklearn.tree._tree.Tree"])
    for features in ([1.0, 2.0, -0.5], [-2.0, -1.0, 1.0], [0.3, -1.2, 2.2]):
        probabilities = model.predict_proba([features])
        assert examples.post("custom-forest", {"features": features}) == {
            "y": probabilities.argmax(axis=1).tolist(),
            "probability": probabilities.max(axis=1).round(3).tolist(),
        }


def test_triton_engine_embeds_like_the_built_in_endpoint(examples, tiny_model):
    run = examples.ran("triton")
    metadata, answer = run.outputs
    assert [i["name"] for i in metadata["inputs"]] == ["input_ids", "attention_mask", "token_type_ids"]
    assert "--input input_ids:INT64:-1,-1 --input attention_mask:INT64:-1,-1" in run.command(
        ".venv/bin/serving endpoints add text-embedding"
    )
    assert np.abs(np.array(answer["y"]) - reference_outputs(tiny_model, ["hello world"])[0]).max() <= 1e-5
    built_in = examples.post("minilm", {"text": "hello world"})["embedding"]
    assert np.abs(np.array(answer["y"]) - np.array(built_in)).max() <= 1e-6 and answer["tokens"] == 4


def test_custom_async_pipeline_fans_out_while_other_requests_are_served(examples):
    import xgboost as xgb

    run = examples.ran("custom_async")
    shown = commands_not_run(EXAMPLES / "custom_async" / "README.md")
    assert len(shown) == 4 and set(shown) <= {*examples.runs["sklearn"].commands, *examples.runs["xgboost"].commands}
    assert run.outputs[0] == {"y": [2, 2]}
    assert "/iris-sklearn/, /iris-xgboost/ answered an error" in run.outputs[1]["error"]["message"]
    model = skops_io().load(examples.model_file("sklearn/sklearn-model.skops"))
    booster = xgb.Booster()
    booster.load_model(examples.model_file("xgboost/xgb-model.json"))
    expected = {
        species: [int(model.predict([row])[0]), int(booster.predict(xgb.DMatrix([row])).argmax())]
        for species, row in IRIS.items()
    }
    assert expected == {species: [species, species] for species in IRIS}
    pipeline_under_load(examples.gateway.url, expected)


def pipeline_under_load(url: str, expected: dict[int, list[int]], concurrent: int = 16, rounds: int = 6) -> None:
    """`concurrent` pipeline requests at once (each fans out to two endpoints), `rounds` times; meanwhile one client
    times /health/live and sends plain requests to another endpoint. Everything answers, and answers right."""
    stop = threading.Event()
    live: list[float] = []
    other: list[tuple[int, dict]] = []

    def meanwhile():
        with httpx.Client(base_url=url, timeout=30) as client:
            while not stop.is_set():
                started = time.perf_counter()
                assert client.get("/health/live").status_code == 200
                live.append(time.perf_counter() - started)
                plain = client.post("/serve/iris-lightgbm", json=flower(IRIS[1]))
                other.append((plain.status_code, plain.json()))

    async def fire() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            answers = []
            for _ in range(rounds):
                bodies = [(i % 3, flower(IRIS[i % 3])) for i in range(concurrent)]
                sent = await asyncio.gather(*(client.post("/serve/iris-pipeline", json=body) for _, body in bodies))
                answers += [(species, response) for (species, _), response in zip(bodies, sent, strict=True)]
            return answers

    prober = threading.Thread(target=meanwhile)
    prober.start()
    started = time.monotonic()
    try:
        answers = asyncio.run(fire())
    finally:
        stop.set()
        prober.join()
    took = time.monotonic() - started
    assert [(r.status_code, r.json()) for _, r in answers] == [(200, {"y": expected[s]}) for s, _ in answers]
    assert live and other and set(map(str, other)) == {str((200, {"y": [1]}))}
    print(
        f"\npipeline: {len(answers)} requests ({concurrent} at once, {2 * len(answers)} fanned out) in {took:.2f} s; "
        f"meanwhile /health/live median {statistics.median(live) * 1000:.1f} ms, max {max(live) * 1000:.1f} ms "
        f"over {len(live)} probes; {len(other)} plain requests to iris-lightgbm, all 200"
    )
    assert max(live) < 2.0, "a sanity bound, not a speed goal: /health/live must not wait for the pipeline"


SYNC_PIPELINE = """
class Preprocess:
    def process(self, data, state, collect_custom_statistics_fn=None):
        if data.get("again"):  # a pipeline that calls itself without end: it must still answer
            answer = self.send_request("sync-pipeline", data=data)
            return {"depth": 1 + (answer or {}).get("depth", 0)}
        answers = [self.send_request(name, data=data["flower"]) for name in ("iris-sklearn", "iris-xgboost")]
        return {"y": [a["y"] if a else None for a in answers]}
"""


def test_sync_pipelines_at_once_and_one_calling_itself_all_answer(examples):
    """Synchronous `send_request` blocks its thread until the endpoint it calls (on this same gateway) answers: 48
    such pipelines at once must not hold every thread while the calls they wait for queue for one (asyncio's default
    pool has the CPU count + 4), and a pipeline calling itself ends at the worker's `max_inflight` (429 below it)."""
    endpoints = examples.workspace / ENDPOINTS
    (endpoints.parent / "sync_pipeline.py").write_text(SYNC_PIPELINE)

    def add(file: EndpointsFile) -> None:
        file.endpoints["sync-pipeline"] = EndpointConfig(engine="custom", preprocess="sync_pipeline.py")

    EndpointsFile.update(endpoints, add)
    try:
        url = f"{examples.gateway.url}/serve/sync-pipeline"
        deadline = time.monotonic() + 30
        while httpx.post(url, json={"flower": flower(IRIS[0])}, timeout=30).status_code != 200:
            assert time.monotonic() < deadline, "the endpoint is served within 30 s of its add"
            time.sleep(0.2)

        async def fire(bodies: list[dict]) -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=90) as client:
                return await asyncio.gather(*(client.post(url, json=body) for body in bodies))

        started = time.monotonic()
        answers = asyncio.run(fire([{"flower": flower(IRIS[i % 3])} for i in range(48)]))
        took = time.monotonic() - started
        assert [(r.status_code, r.json()) for r in answers] == [(200, {"y": [[i % 3], [i % 3]]}) for i in range(48)], (
            "every pipeline answered, and right"
        )
        started = time.monotonic()
        (looped,) = asyncio.run(fire([{"again": True}]))
        print(
            f"\n48 sync pipelines at once: all 200 in {took:.2f} s; a pipeline calling itself answered "
            f"{looped.status_code} {looped.json()} in {time.monotonic() - started:.2f} s"
        )
        assert looped.status_code == 200 and looped.json()["depth"] >= 2
    finally:
        EndpointsFile.update(endpoints, lambda file: file.remove("endpoints", "sync-pipeline"))


def test_the_index_lists_and_removes_the_examples_endpoints(examples):
    run = run_readme(EXAMPLES / "README.md", examples.workspace, {}, examples.workspace / "out-index")
    assert run.failure is None, run.failure
    endpoints = EndpointsFile.read(examples.workspace / ENDPOINTS).endpoints
    assert {name: config.engine for name, config in endpoints.items()} == {
        "iris-sklearn": "sklearn",
        "iris-xgboost": "xgboost",
        "custom-forest": "custom",
        "text-embedding": "triton",
        "iris-pipeline": "custom_async",
    }
    deadline = time.monotonic() + 10
    while (gone := httpx.post(f"{examples.gateway.url}/serve/iris-lightgbm", json={})).status_code != 404:
        assert time.monotonic() < deadline, gone.text
        time.sleep(0.2)

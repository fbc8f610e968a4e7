"""The model lifecycle with real parts: the MLflow registry (embedded SQLite store), the real Triton, the real
gateway and controller processes of STACK=clearml, traffic from the project's load generator.

One stack for the module; each test works on the endpoint `emb`, fed by registered model `tiny-emb`, in order:
auto-update under load, canary split, rollback of a version failing half its requests, rejection of another contract,
a controller killed mid-rollout, a corrupt upload, an unreachable registry."""

from __future__ import annotations

import re
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx

from loadtest import engine
from loadtest.targets import build_targets
from services.common.settings import default_state_url
from services.launcher import Launcher, stop_group
from services.registry.mlflow_registry import DatasetRef
from services.triton.control_key import KEY_FILE
from tests.support.lifecycle import attack_in_background, broken_model, register_dir


def test_admin_api_needs_the_token(stack):
    assert httpx.get(f"{stack.url}/admin/endpoints", timeout=10).status_code == 401
    wrong = httpx.get(f"{stack.url}/admin/endpoints", headers={"Authorization": "Bearer nope"}, timeout=10)
    assert wrong.status_code == 401 and "Bearer" in wrong.json()["error"]["message"]
    assert stack.admin("GET", "/endpoints") == {"endpoints": []}


def test_a_new_version_is_served_under_load_without_a_failed_request(stack, checkpoints, tmp_path):
    data = tmp_path / "sentiment.csv"
    data.write_text("text,label\nthe food was good,positive\nthe food was bad,negative\n")
    stack.admin("PUT", "/endpoints/emb/auto-update", {"name": "tiny-emb", "max_versions": 2})
    first = stack.registry.register(checkpoints["a"], "tiny-emb", dataset=DatasetRef(data, "sentiment", "3"))
    assert first["version"] == "1"
    stack.wait_for("version 1 serving", lambda: stack.serve().status_code == 200)

    thread, results = attack_in_background(stack, seconds=18, rate=60)
    time.sleep(2)
    registered_at = time.monotonic()
    assert stack.registry.register(checkpoints["b"], "tiny-emb")["version"] == "2"
    stack.wait_for("version 2 answering", lambda: stack.serve().headers.get("x-model-version") == "2", timeout=30)
    switch_seconds = time.monotonic() - registered_at
    thread.join()
    codes = Counter(result.code for result in results)
    assert codes == {200: len(results)} and len(results) >= 1000, codes
    assert switch_seconds < 30

    lineage = stack.versions()["1"]
    assert lineage["registry"] == {
        "name": "tiny-emb",
        "version": "1",
        "url": "http://127.0.0.1:5000/#/models/tiny-emb/versions/1?workflowType=machine_learning",
    }
    assert lineage["run"]["id"] == first["run_id"] and first["run_id"] in lineage["run"]["url"]
    assert lineage["datasets"][0] | {"source": None, "run_id": None, "url": None} == {
        "name": "sentiment",
        "version": "3",
        "source": None,
        "run_id": None,
        "url": None,
        "digest": DatasetRef(data).digest,
    }
    assert set(lineage["artifacts"]) >= {"model.onnx", "tokenizer.json"}
    assert stack.versions()["2"]["traffic_share"] == 1.0


def test_canary_split_reaches_the_workers_and_a_key_sticks(stack, checkpoints):
    stack.admin("PUT", "/endpoints/emb/canary", {"versions": ["2", "1"], "weights": [0.1, 0.9]})
    stack.wait_for(
        "the split to reach the workers",
        lambda: Counter(stack.serve().headers["x-model-version"] for _ in range(40))["1"] > 20,
    )
    # The split's arithmetic is tests/unit/lifecycle/test_routing.py's (20,000 draws); here the wiring: the weights
    # reach every worker and the share lands near them. 600 draws: the 5-point bound is 4.1 standard deviations of
    # a 10% share; over kept-alive connections
    with httpx.Client(timeout=30) as client, ThreadPoolExecutor(16) as pool:
        answer = lambda _: client.post(f"{stack.url}/serve/emb", json={"text": "hello world"})  # noqa: E731
        answered = [response.headers["x-model-version"] for response in pool.map(answer, range(600))]
    share = Counter(answered)["2"] / len(answered)
    assert 0.05 <= share <= 0.15, share
    assert len({stack.serve(key="caller-7").headers["x-model-version"] for _ in range(20)}) == 1


def test_a_version_failing_half_its_requests_is_rolled_back_and_tagged(stack, tmp_path):
    """The broken version (`broken_model`) fails every request longer than 24 tokens: half of this traffic."""
    model_dir = broken_model(tmp_path)
    stack.admin("PUT", "/endpoints/emb/canary", {"versions": ["2"], "weights": [1.0]})  # new versions wait
    version = register_dir(stack, model_dir, "a broken upload")
    assert version == "3"
    stack.wait_for("version 3 live", lambda: stack.versions().get("3", {}).get("state") == "live", timeout=90)
    long_text = " ".join(["the quick brown fox jumps over the lazy dog"] * 3)
    targets = build_targets(stack.url, "serve", ["hello world", long_text], endpoint="emb")
    results: list = []
    spec = engine.AttackSpec(targets=targets, rate=30, duration=20, timeout=30)
    thread = threading.Thread(target=lambda: engine.attack(spec, results.append), daemon=True)
    thread.start()
    stack.admin(
        "POST",
        "/endpoints/emb/rollout",
        {"version": "3", "steps": [50, 100], "dwell": 4, "max_error_rate": 0.01, "max_p99_ratio": 5},
    )
    stack.wait_for("the rollback", lambda: stack.versions()["3"]["state"] == "rejected", timeout=40)
    rolled_back_at = time.time()
    versions = stack.versions()
    assert versions["2"]["traffic_share"] == 1.0 and "error rate" in versions["3"]["reason"]
    tags = lambda: {v.version: v.tags for v in stack.registry.versions("tiny-emb")}["3"]  # noqa: E731
    stack.wait_for("the rollback's registry tags", lambda: "rollout.numbers" in tags(), timeout=20)  # one at a time
    assert tags()["rollout"] == "rejected" and "new_error_rate" in tags()["rollout.numbers"]
    thread.join()
    failed = [r for r in results if r.code != 200]
    assert failed and {r.code for r in failed} == {500}, "the broken version's failures, during its 50% step"
    settle = rolled_back_at + 2  # the workers re-read the state within their poll interval
    assert all(r.code == 200 for r in results if r.timestamp > settle), "after the rollback every request succeeds"


def test_a_version_with_another_tensor_contract_is_rejected(stack, checkpoints):
    assert stack.registry.register(checkpoints["wide"], "tiny-emb")["version"] == "4"
    stack.wait_for("the rejection", lambda: stack.versions().get("4", {}).get("state") == "rejected", timeout=90)
    assert "tensor contract" in stack.versions()["4"]["reason"]
    tags = {v.version: v.tags for v in stack.registry.versions("tiny-emb")}
    assert tags["4"]["deployment"] == "rejected"
    assert httpx.get(f"{stack.triton}/v2/models/emb/versions/4/ready", timeout=5).status_code != 200
    assert stack.serve().status_code == 200


def test_a_killed_controller_leaves_traffic_consistent_and_a_restarted_one_carries_on(stack, checkpoints):
    assert stack.registry.register(checkpoints["c"], "tiny-emb")["version"] == "5"
    stack.wait_for("version 5 live", lambda: stack.versions().get("5", {}).get("state") == "live", timeout=90)
    done = threading.Event()  # traffic until the promotion (at most 40 s): the steps need it, even a slow restart's
    thread, results = attack_in_background(stack, seconds=40, rate=40, stop=done)
    stack.admin(
        "POST",
        "/endpoints/emb/rollout",
        {
            "version": "5",
            "steps": [50, 100],
            "dwell": 4,
            "max_error_rate": 0.05,
            "max_p99_ratio": 5,
            "min_requests": 10,
        },
    )
    stack.wait_for("the first step", lambda: stack.versions()["5"]["traffic_share"] == 0.5)
    spec, proc = stack.controller()
    stop_group(proc.pid, timeout=1)  # SIGTERM, then SIGKILL: gone mid-rollout
    stack.launcher.procs.remove((spec, proc))
    time.sleep(2)
    shares = {v: item["traffic_share"] for v, item in stack.versions().items() if item["traffic_share"]}
    assert shares == {"5": 0.5, "2": 0.5}, "traffic stays on the step's live versions"
    assert {stack.serve().status_code for _ in range(10)} == {200}
    stack.launcher.start(spec, detach=True)
    stack.wait_for("the last step", lambda: stack.versions()["5"]["traffic_share"] == 1.0, timeout=40)
    stack.wait_for("the promotion", lambda: champion(stack) == "5", timeout=60)  # judged once the step has its data
    done.set()
    thread.join()
    assert {r.code for r in results} == {200}


def champion(stack) -> str | None:
    """The version the registry's `champion` alias names (a promoted rollout sets it); None while there is none."""
    try:
        return str(stack.registry.client.get_model_version_by_alias("tiny-emb", "champion").version)
    except Exception:  # noqa: BLE001 - MLflow's own exception for an alias not set yet
        return None


def test_a_gateway_without_a_built_in_model_starts_and_serves_deployed_endpoints(stack, tmp_path):
    from tests.support.servers import start_http_stack

    env = {
        "GATEWAY_TRITON_GRPC_URL": f"127.0.0.1:{stack.options.triton_ports.grpc}",
        "SERVING_STATE_URL": default_state_url(stack.options.run_dir),  # the stack's own store, shared
        "GATEWAY_CONTROLLER_MODELS_DIR": str(stack.options.run_dir / "lifecycle" / "models"),  # the controller's copies
    }
    gateway = start_http_stack(
        tmp_path,
        stack.options.model_dir,
        env=env | {"SERVING_MODEL_DIR": str(tmp_path / "none")},
        app="services.gateway.app:create_app()",
    )
    try:
        with gateway.client() as client:
            assert client.get("/health/ready").json()["endpoints"] == ["emb"]
            assert client.post("/serve/emb", json={"text": "hello"}).status_code == 200
            assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["emb"]  # what /v1/embeddings takes
            assert client.post("/v1/embeddings", json={"model": "emb", "input": "hello"}).status_code == 200
            missing = client.post("/serve/minilm", json={"text": "hello"})
            assert missing.status_code == 404 and "this server serves 'emb'" in missing.json()["error"]["message"]
    finally:
        gateway.launcher.stop_all()


def test_a_corrupt_artifact_is_rejected_and_never_served(stack, checkpoints, tmp_path):
    from services.common.contract import MODEL_FILE
    from services.modelbuild.export import build

    model_dir = tmp_path / "model"
    build(model_dir, checkpoints["a"])
    with open(model_dir / MODEL_FILE, "ab") as handle:  # bytes changed after the manifest hashed them
        handle.write(b"corrupted in storage")
    mlflow = stack.registry.mlflow
    with mlflow.start_run(experiment_id=stack.registry.experiment_id(), run_name="corrupt upload") as run:
        mlflow.log_artifacts(str(model_dir), artifact_path="model")
    version = str(
        stack.registry.client.create_model_version(
            "tiny-emb", source=f"runs:/{run.info.run_id}/model", run_id=run.info.run_id
        ).version
    )
    stack.wait_for("the rejection", lambda: stack.versions().get(version, {}).get("state") == "rejected", timeout=60)
    assert "does not match its manifest hash" in stack.versions()[version]["reason"]
    assert httpx.get(f"{stack.triton}/v2/models/emb/versions/{version}/ready", timeout=5).status_code != 200
    assert {v.version: v.tags for v in stack.registry.versions("tiny-emb")}[version]["deployment"] == "rejected"
    assert stack.serve().status_code == 200


def test_an_unreachable_registry_is_said_once_while_the_controller_lives_on(stack, tmp_path):
    from services.launcher import ProcessSpec
    from services.lifecycle.deployments import EndpointState
    from services.lifecycle.store import DeploymentStore

    state_url = default_state_url(tmp_path)
    DeploymentStore.open(state_url).update(
        lambda s: s.endpoints.setdefault("elsewhere", EndpointState(registered_name="tiny-emb"))
    )
    spec = ProcessSpec(
        name="controller",
        argv=[sys.executable, "-m", "services.controller"],
        env={
            "MLFLOW_TRACKING_URI": "http://127.0.0.1:1",
            "SERVING_STATE_URL": state_url,
            "CONTROLLER_TRITON_REPOSITORY": str(tmp_path / "repository"),
            "CONTROLLER_TRITON_HTTP_URL": stack.triton,
            "CONTROLLER_TRITON_CONTROL_KEY_FILE": str(stack.options.run_dir / KEY_FILE),
            "CONTROLLER_GATEWAY_URL": stack.url,
            "CONTROLLER_INTERVAL": "0.2",
        },
    )
    launcher = Launcher(tmp_path)
    proc = launcher.start(spec, detach=True)
    try:
        log = tmp_path / "logs" / "controller.log"
        said = r"WARNING .*the registry at http://127.0.0.1:1 does not answer: .*; the deployed versions keep serving"
        deadline = time.monotonic() + 60
        while not re.search(said, log.read_text() if log.exists() else ""):
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.5)
        time.sleep(3.0)  # 15 ticks more
        assert proc.poll() is None
        assert len(re.findall(" (WARNING|ERROR) ", log.read_text())) == 1, "said once, not once a tick"
        assert stack.serve().status_code == 200, "serving goes on without the registry"
    finally:
        launcher.stop_all()


def test_a_new_version_under_an_auto_update_policy_is_rolled_out_then_promoted(stack, checkpoints):
    policy = {"steps": [50, 100], "dwell": 3, "max_error_rate": 0.05, "max_p99_ratio": 5, "min_requests": 10}
    stack.admin("PUT", "/endpoints/emb/auto-update", {"name": "tiny-emb", "max_versions": 2, "rollout": policy})
    done = threading.Event()
    thread, results = attack_in_background(stack, seconds=40, rate=40, stop=done)  # until the promotion
    version = stack.registry.register(checkpoints["b"], "tiny-emb")["version"]
    stack.wait_for("its first step", lambda: stack.versions().get(version, {}).get("traffic_share") == 0.5, 90)
    assert stack.versions()[version]["share_reason"] == "rollout: step 1 of 2, 50% to it"
    stack.wait_for("the last step", lambda: stack.versions()[version]["traffic_share"] == 1.0, timeout=60)
    stack.wait_for("the promotion", lambda: champion(stack) == version, timeout=60)
    done.set()
    thread.join()
    assert {r.code for r in results} == {200}

"""The lifecycle controller (`serving controller`, started by `make up STACK=clearml`): reconciles the deployment
state with the registry and Triton, one endpoint at a time, once a second.

- auto-update: a new registry version of the endpoint's model is fetched, verified (artifact hashes, tensor
  contract, a forward pass), placed into Triton's repository as a new version, loaded, warmed up and checked through
  Triton, and only then made live; a version that fails any step is never given traffic and its registry version is
  tagged with the reason;
- versions beyond the newest `max_versions` are drained (no new traffic, then unloaded once the gateway's workers
  have all seen the change);
- a rollout moves traffic step by step and judges each step from the gateway's per-version metrics; a breach sends
  all traffic back to the stable version and tags the registry version `rollout=rejected`;
- versions the state calls live but Triton does not serve (Triton restarted) are loaded again.

Every step reads the state, acts, and writes its result back under the state's lock, so the admin API can change the
state at any time and a killed controller, restarted, carries on from the file.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import time
from pathlib import Path

import httpx
import numpy as np
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.common.contract import TOKENIZER_FILE, Manifest
from services.common.errors import ServingError, Unavailable
from services.launcher import RUN_DIR
from services.lifecycle.rollout import Snapshot, judge, parse_snapshot, window
from services.lifecycle.state import Deployments, DeploymentStore, EndpointState, VersionState, now_iso
from services.lifecycle.triton_models import WARMUP_TEXTS, TritonModels
from services.monitoring.reference import write_reference
from services.triton.repository import RenderOptions

log = logging.getLogger("controller")


class ControllerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CONTROLLER_", extra="ignore")

    deployments_file: Path = Field(default_factory=lambda: RUN_DIR / "lifecycle" / "deployments.json")
    models_dir: Path = Field(default_factory=lambda: RUN_DIR / "lifecycle" / "models")
    """Where fetched registry versions are kept while deployed."""
    triton_repository: Path = Field(default_factory=lambda: RUN_DIR / "triton-repository")
    triton_http_url: str = "http://127.0.0.1:8000"
    triton_target: str = "local"
    """How versions are placed: local (the wheel's Triton, Python-backend encoder over ONNX Runtime) or container (the
    NGC image's native onnxruntime backend; files copied, not linked, since Triton runs in another container)."""
    triton_gpu: bool = False
    """container: give each deployed version a GPU instance group."""
    gateway_url: str = "http://127.0.0.1:8080"
    """Where the gateway's /metrics are read for rollout decisions."""
    interval: float = Field(1.0, gt=0)
    drain_seconds: float = Field(3.0, ge=0)
    """How long a version gets no new traffic before it is unloaded: longer than the gateway's poll interval plus
    its slowest request."""
    log_json: bool = False
    """One JSON object a line (what `serving logs` merges) instead of plain text."""
    max_backoff: float = Field(30.0, gt=0)
    """Longest wait between retries while the registry or Triton is unreachable."""


class Controller:
    def __init__(self, settings: ControllerSettings, registry, triton: TritonModels):
        self.settings = settings
        self.registry = registry
        self.triton = triton
        self.store = DeploymentStore(settings.deployments_file)
        self.backoff: dict[str, float] = {}  # what -> monotonic time before which it is not retried
        self.failures: dict[str, int] = {}

    # --- the loop -------------------------------------------------------------------------------------------------
    def run(self) -> None:
        stop = {"now": False}
        signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
        signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
        log.info("controller watching %s", self.settings.deployments_file)
        while not stop["now"]:
            self.tick()
            time.sleep(self.settings.interval)
        log.info("controller stopped")

    def tick(self) -> None:
        for name in list(self.store.read().endpoints):
            for step in (
                self.discover,
                self.deploy_loading,
                self.reconcile,
                self.advance_rollout,
                self.prune,
                self.unload_drained,
            ):
                self._guarded(f"{step.__name__}:{name}", step, name)

    def _guarded(self, key: str, step, name: str) -> None:
        """Run one step; when it fails on something outside (registry, Triton, gateway), retry it later with
        exponential backoff and say so, instead of failing the other steps or exiting."""
        if time.monotonic() < self.backoff.get(key, 0):
            return
        try:
            step(name)
        except Exception as exc:  # noqa: BLE001 - registry, Triton or gateway away: the loop must live on
            failures = self.failures[key] = self.failures.get(key, 0) + 1
            delay = min(self.settings.max_backoff, self.settings.interval * 2**failures)
            self.backoff[key] = time.monotonic() + delay
            log.warning("%s failed (%s); retrying in %.0fs", key, exc, delay)
        else:
            if self.failures.pop(key, None):
                log.info("%s works again", key)
            self.backoff.pop(key, None)

    def _endpoint(self, name: str) -> EndpointState | None:
        return self.store.read().endpoints.get(name)

    # --- auto-update ------------------------------------------------------------------------------------------------
    def discover(self, name: str) -> None:
        endpoint = self._endpoint(name)
        if endpoint is None or not endpoint.registered_name:
            return
        newest_known = max((int(v) for v in endpoint.versions), default=0)
        new = [
            v.version
            for v in self.registry.versions(endpoint.registered_name)
            if int(v.version) > newest_known and v.tags.get("deployment") != "refused"
        ]
        if not new:
            return
        new = new[-endpoint.max_versions :]

        def add(state: Deployments) -> None:
            item = state.endpoints[name]
            for version in new:
                item.versions.setdefault(version, VersionState(version=version))

        self.store.update(add)
        log.info("endpoint '%s': new registry versions %s of '%s' to deploy", name, new, endpoint.registered_name)

    def deploy_loading(self, name: str) -> None:
        endpoint = self._endpoint(name)
        for version, item in sorted(endpoint.versions.items(), key=lambda kv: int(kv[0])) if endpoint else []:
            if item.state == "loading":
                self.deploy(name, version)

    def deploy(self, name: str, version: str) -> None:
        endpoint = self._endpoint(name)
        registered = endpoint.registered_name or name
        # the registry unreachable: raised, so the step is retried with backoff
        model_dir = self.registry.fetch(registered, version, self.settings.models_dir / name / version)
        try:
            manifest = self.verify(endpoint, model_dir)
            self.triton.place(name, version, model_dir)
            self.triton.load(name)
            self.triton.wait_ready(name, version)
            self.check_through_triton(name, version, model_dir, manifest)
        except Unavailable:
            raise  # Triton unreachable: retried too, the version is not at fault
        except Exception as exc:  # noqa: BLE001 - whatever the version does wrong (ONNX Runtime errors included)
            self.refuse(name, registered, version, str(exc).strip()[:500])
            return
        lineage = self.registry.lineage(registered, version, model_dir)
        try:
            write_reference(model_dir, lineage)  # else the gateway takes the version's first requests
        except Exception as exc:  # noqa: BLE001 - a missing drift reference must not block a deployment
            log.warning("endpoint '%s': no drift reference from the data set of version %s: %s", name, version, exc)

        def live(state: Deployments) -> None:
            item = state.endpoints[name]
            record = item.versions[version]
            record.state, record.model_dir, record.deployed_at = "live", str(model_dir), now_iso()
            record.lineage = lineage
            if not item.contract_outputs:
                item.contract_inputs, item.contract_outputs = manifest.inputs, manifest.outputs

        self.store.update(live)
        log.info("endpoint '%s': version %s of '%s' is live", name, version, registered)

    def verify(self, endpoint: EndpointState, model_dir: Path) -> Manifest:
        """Artifacts intact, the endpoint's tensor contract kept, and a forward pass that gives that contract."""
        from services.common.onnx_runner import OnnxModel
        from services.common.tokenization import TextTokenizer

        manifest = Manifest.load(model_dir)
        manifest.verify_files(model_dir)
        if endpoint.contract_outputs and (manifest.inputs, manifest.outputs) != (
            endpoint.contract_inputs,
            endpoint.contract_outputs,
        ):
            raise ValueError(
                f"tensor contract differs from the endpoint's: inputs {[t.model_dump() for t in manifest.inputs]}, "
                f"outputs {[t.model_dump() for t in manifest.outputs]}; the endpoint serves "
                f"outputs {[t.model_dump() for t in endpoint.contract_outputs]}"
            )
        tokenizer = TextTokenizer(model_dir / TOKENIZER_FILE, manifest.max_seq_length)
        outputs = OnnxModel(model_dir, manifest, threads=1).run(
            tokenizer.encode(WARMUP_TEXTS).tensors(manifest.input_names)
        )
        self._check_output(outputs, manifest)
        return manifest

    def check_through_triton(self, name: str, version: str, model_dir: Path, manifest: Manifest) -> None:
        for _ in range(3):  # warm-up, and proof that the loaded version answers with its contract
            self._check_output(self.triton.infer(name, version, model_dir, WARMUP_TEXTS), manifest)

    @staticmethod
    def _check_output(outputs: np.ndarray, manifest: Manifest) -> None:
        expected = [len(WARMUP_TEXTS), *manifest.output.shape[1:]]
        if list(outputs.shape) != [d if d != -1 else outputs.shape[i] for i, d in enumerate(expected)]:
            raise ValueError(f"output shape {list(outputs.shape)} does not match the manifest's {expected}")
        if not np.isfinite(outputs).all():
            raise ValueError("the model's output has NaN or infinite values")

    def refuse(self, name: str, registered: str, version: str, reason: str) -> None:
        log.error("endpoint '%s': version %s of '%s' refused: %s", name, version, registered, reason)
        if self.triton.placed(name, version):
            self.triton.remove(name, version)
            try:
                self.triton.load(name)
            except ServingError as exc:
                log.warning("endpoint '%s': reload after removing version %s failed: %s", name, version, exc)

        def reject(state: Deployments) -> None:
            record = state.endpoints[name].versions[version]
            record.state, record.reason, record.drain_started = "rejected", reason, None

        self.store.update(reject)
        self.registry.tag(registered, version, {"deployment": "refused", "deployment.reason": reason})

    # --- keeping Triton in step ---------------------------------------------------------------------------------
    def reconcile(self, name: str) -> None:
        """Live versions Triton does not serve (it restarted with a freshly rendered repository) are loaded again."""
        endpoint = self._endpoint(name)
        missing = [v for v in endpoint.live() if not self.triton.ready(name, v)]
        if not missing:
            return
        for version in missing:
            model_dir = Path(endpoint.versions[version].model_dir or "")
            self.triton.place(name, version, model_dir)
        self.triton.load(name)
        for version in missing:
            self.triton.wait_ready(name, version)
        log.info("endpoint '%s': versions %s loaded into Triton again", name, missing)

    def prune(self, name: str) -> None:
        """Live versions beyond the newest `max_versions` (and not in a rollout or a canary split) start draining."""
        endpoint = self._endpoint(name)
        keep = set(endpoint.live()[: endpoint.max_versions]) | set(endpoint.weights)
        if endpoint.rollout and endpoint.rollout.status == "running":
            keep |= {endpoint.rollout.version, endpoint.rollout.stable}
        retire = [v for v in endpoint.live() if v not in keep]
        if not retire:
            return

        def drain(state: Deployments) -> None:
            for version in retire:
                record = state.endpoints[name].versions[version]
                record.state, record.drain_started = "draining", time.time()

        self.store.update(drain)
        log.info("endpoint '%s': draining versions %s (beyond the newest %d)", name, retire, endpoint.max_versions)

    def unload_drained(self, name: str) -> None:
        endpoint = self._endpoint(name)
        due = [
            v
            for v, item in endpoint.versions.items()
            if item.state in ("draining", "rejected")
            and item.drain_started is not None
            and time.time() - item.drain_started >= self.settings.drain_seconds
        ]
        if not due:
            return
        for version in due:
            self.triton.remove(name, version)
        self.triton.load(name)

        def done(state: Deployments) -> None:
            item = state.endpoints[name]
            for version in due:
                if item.versions[version].state == "draining":
                    del item.versions[version]
                    shutil.rmtree(self.settings.models_dir / name / version, ignore_errors=True)
                else:
                    item.versions[version].drain_started = None

        self.store.update(done)
        log.info("endpoint '%s': versions %s unloaded", name, due)

    # --- rollouts -------------------------------------------------------------------------------------------------
    def snapshot(self, name: str) -> Snapshot:
        text = httpx.get(f"{self.settings.gateway_url.rstrip('/')}/metrics", timeout=10).text
        return parse_snapshot(text, name)

    def advance_rollout(self, name: str) -> None:
        endpoint = self._endpoint(name)
        rollout = endpoint.rollout if endpoint else None
        if rollout is None or rollout.status != "running":
            return
        new = endpoint.versions.get(rollout.version)
        if new is None or new.state == "rejected":
            self._finish(name, "rolled_back", f"version {rollout.version} was refused at deployment")
            return
        if new.state != "live":
            return  # still loading
        now = time.time()
        if rollout.step_started is None or rollout.baseline is None:
            self._start_step(name, rollout.step, self.snapshot(name))
            return
        if now - rollout.step_started < rollout.dwell:
            return
        current = self.snapshot(name)
        observed = window(Snapshot.model_validate(rollout.baseline), current)
        if observed is None:  # the gateway restarted: counters went back; judge a fresh window
            self._start_step(name, rollout.step, current)
            return
        decision = judge(rollout, observed)
        if decision.action == "wait":
            return
        if decision.action == "rollback":
            self._roll_back(name, endpoint, decision)
        elif rollout.step + 1 < len(rollout.steps):
            self._start_step(name, rollout.step + 1, current)
            log.info(
                "endpoint '%s': rollout of version %s passed %d%% %s; now %d%%",
                name,
                rollout.version,
                rollout.steps[rollout.step],
                decision.numbers,
                rollout.steps[rollout.step + 1],
            )
        else:
            self._promote(name, endpoint, decision)

    def _start_step(self, name: str, step: int, baseline: Snapshot) -> None:
        def change(state: Deployments) -> None:
            rollout = state.endpoints[name].rollout
            rollout.step, rollout.step_started, rollout.baseline = step, time.time(), baseline.model_dump()

        self.store.update(change)

    def _finish(
        self, name: str, status: str, outcome: str, weights: dict[str, float] | None = None, reject: str | None = None
    ) -> None:
        def change(state: Deployments) -> None:
            item = state.endpoints[name]
            item.rollout.status, item.rollout.outcome, item.rollout.baseline = status, outcome, None
            if weights is not None:
                item.weights = weights
            if reject and reject in item.versions:
                record = item.versions[reject]
                record.state, record.reason, record.drain_started = "rejected", outcome, time.time()

        self.store.update(change)

    def _roll_back(self, name: str, endpoint: EndpointState, decision) -> None:
        rollout = endpoint.rollout
        outcome = f"rolled back at {rollout.steps[rollout.step]}%: {decision.reason} {json.dumps(decision.numbers)}"
        self._finish(name, "rolled_back", outcome, weights={rollout.stable: 1.0}, reject=rollout.version)
        log.warning("endpoint '%s': rollout of version %s %s", name, rollout.version, outcome)
        if endpoint.registered_name:
            self.registry.tag(
                endpoint.registered_name,
                rollout.version,
                {
                    "rollout": "rejected",
                    "rollout.reason": decision.reason,
                    "rollout.numbers": json.dumps(decision.numbers),
                },
            )

    def _promote(self, name: str, endpoint: EndpointState, decision) -> None:
        rollout = endpoint.rollout
        outcome = f"promoted: {json.dumps(decision.numbers)}"
        self._finish(name, "promoted", outcome, weights={rollout.version: 1.0})
        log.info("endpoint '%s': version %s %s", name, rollout.version, outcome)
        if endpoint.registered_name:
            self.registry.promote(endpoint.registered_name, rollout.version)
            self.registry.tag(endpoint.registered_name, rollout.version, {"rollout": "promoted"})


def main() -> None:
    from observability.logging import setup_logging
    from services.registry.mlflow_registry import ModelRegistry

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    # The controller retries a failing step itself, with its own backoff, and says so; MLflow's client would
    # otherwise retry each call for minutes inside one step and stall every endpoint's reconciliation.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    settings = ControllerSettings()
    setup_logging("INFO", json_lines=settings.log_json)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a readiness probe a second is not news
    options = RenderOptions(target=settings.triton_target, gpu=settings.triton_gpu)
    triton = TritonModels(settings.triton_repository, settings.triton_http_url, options)
    Controller(settings, ModelRegistry(), triton).run()


if __name__ == "__main__":
    main()

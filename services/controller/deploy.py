"""Auto-update: new registry versions of an endpoint's model are found, fetched, verified (artifact hashes, tensor
contract, a forward pass here), placed into Triton's repository, loaded, and checked through Triton (which also warms
them up); only then are they live. A version that fails a check is taken out of Triton, never given traffic, and its
registry version is tagged `deployment=rejected` with the reason. The registry or Triton being unreachable is not the
version's fault: the step raises and the loop retries it later.

`Deployer` places versions into the controller's own Triton (CONTROLLER_PLACEMENT=local). `ReplicaDeployer`
(CONTROLLER_PLACEMENT=agents) touches no Triton: a version is fetched and checked here the same way (hashes,
contract, forward pass), recorded as verified, loaded and warmed up by the agent beside each Triton replica
(`services.replica.agent`), and made live once every replica that reports holds it (`placement`). The controller
picks one of them at start.

A version is fetched into, read from and removed from `<models_dir>/<endpoint>/<version>` (`model_dirs`): the state's
`model_dir` is a record, never a path the controller acts on."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from services.common.artifacts import ArtifactRefused
from services.common.contract import MANIFEST_FILE, WARMUP_TEXTS, Manifest
from services.common.errors import NotFound, ServingError, Unavailable
from services.controller.forward import isolated_forward
from services.controller.settings import ControllerSettings
from services.lifecycle import placement, transitions
from services.lifecycle.checks import check_contract, check_output, public_reason
from services.lifecycle.deployments import EndpointState, Phase
from services.lifecycle.model_dirs import artifact_dir, version_root
from services.lifecycle.ports import Registry, TritonControl
from services.lifecycle.store import DeploymentStore
from services.monitoring.reference import write_reference

log = logging.getLogger("controller")

Forward = Callable[[Path, Manifest], np.ndarray]
"""Runs the warm-up texts through a fetched version outside Triton; returns its first output."""


class Deployer:
    """Auto-update into the controller's own Triton (CONTROLLER_PLACEMENT=local)."""

    def __init__(
        self,
        settings: ControllerSettings,
        store: DeploymentStore,
        registry: Registry,
        triton: TritonControl,
        clock: Callable[[], float],
        forward: Forward | None = None,
    ):
        self.settings, self.store, self.registry, self.triton = settings, store, registry, triton
        self.clock = clock
        self.forward = forward or partial(isolated_forward, timeout=settings.forward_timeout)
        """The forward pass a version must pass here (`forward`: in a child process, within a time limit)."""

    def discover(self, name: str) -> None:
        """New registry versions of the endpoint's model become `loading`."""
        endpoint = self.store.endpoint(name)
        if endpoint is None or not endpoint.registered_name:
            return
        found = self.registry.versions(endpoint.registered_name)
        if not transitions.discoverable(endpoint, found):
            return  # nothing new: the file is not rewritten, so the gateway's workers have nothing to re-read
        new = self.store.update(lambda s: transitions.add_discovered(s, name, found))
        log.info("endpoint '%s': new registry versions %s of '%s' to deploy", name, new, endpoint.registered_name)

    def deploy_loading(self, name: str) -> None:
        endpoint = self.store.endpoint(name)
        for version, item in sorted(endpoint.versions.items(), key=lambda kv: int(kv[0])) if endpoint else []:
            if item.state == Phase.LOADING:
                self.deploy(name, version)

    def deploy(self, name: str, version: str) -> None:
        """Fetch, verify, place into Triton, load, check through Triton, then live; rejected at the first failure."""
        endpoint = self.store.endpoint(name)  # again: the version before this one may have fixed the contract
        if endpoint is None:  # removed meanwhile
            return
        registered = endpoint.registered_name or name
        model_dir = self.fetch(name, registered, version)
        if model_dir is None:
            return
        try:
            manifest = self.verify(endpoint, model_dir)
            self.triton.place(name, version, model_dir)
            self.triton.load(name)
            self.triton.wait_ready(name, version)
            self.check_through_triton(name, version, model_dir, manifest)
        except Unavailable:
            raise  # Triton unreachable: retried too, the version is not at fault
        except Exception as exc:  # noqa: BLE001 - whatever the version does wrong (ONNX Runtime errors included)
            self.reject(name, registered, version, str(exc).strip()[:500])
            return
        lineage = self.registry.lineage(registered, version, model_dir)
        self.write_reference(name, version, model_dir, lineage)
        now = self.clock()
        self.go_live(name, registered, version, model_dir, lineage, manifest, now)

    def go_live(
        self,
        name: str,
        registered: str,
        version: str,
        model_dir: Path,
        lineage: dict,
        manifest: Manifest,
        now: float,
        where: str = "",
    ) -> None:
        """Mark `version` live, unless it was removed while it was being deployed (`transitions.mark_live`)."""
        made_live = self.store.update(
            lambda s: transitions.mark_live(
                s, name, version, model_dir=str(model_dir), lineage=lineage, manifest=manifest, now=now
            )
        )
        if made_live:
            endpoint = self.store.endpoint(name)
            rollout = endpoint.running_rollout() if endpoint is not None else None
            policy = ""
            if rollout and rollout.version == version and rollout.step_started is None:
                policy = f", rolled out under the auto-update policy against version {rollout.stable}"
            log.info("endpoint '%s': version %s of '%s' is live%s%s", name, version, registered, where, policy)
        else:
            log.info(
                "endpoint '%s': version %s of '%s' was removed while it was deployed: not live",
                name,
                version,
                registered,
            )

    def fetch(self, name: str, registered: str, version: str) -> Path | None:
        """The version's files, or None when its artifact breaks a rule or it has none (registered from no run): then
        it is rejected, and the versions after it are not held back. The registry unreachable raises, so that the
        step is retried with backoff."""
        try:
            return self.registry.fetch(registered, version, version_root(self.settings.models_dir, name, version))
        except (ArtifactRefused, NotFound) as exc:
            self.reject(name, registered, version, exc.message)
            return None

    def write_reference(self, name: str, version: str, model_dir: Path, lineage: dict) -> None:
        try:
            write_reference(model_dir, lineage)  # else the gateway takes the version's first requests
        except Exception as exc:  # noqa: BLE001 - a missing drift reference must not block a deployment
            log.warning("endpoint '%s': no drift reference from the data set of version %s: %s", name, version, exc)

    def verify(self, endpoint: EndpointState, model_dir: Path) -> Manifest:
        """Artifacts intact (every file sealed by the manifest, nothing else), the endpoint's tensor contract kept, and
        a forward pass that gives that contract."""
        manifest = Manifest.load(model_dir)
        manifest.verify_files(model_dir, exact=True)
        check_contract(endpoint, manifest)
        check_output(self.forward(model_dir, manifest), manifest)
        return manifest

    def check_through_triton(self, name: str, version: str, model_dir: Path, manifest: Manifest) -> None:
        for _ in range(3):  # warm-up, and proof that the loaded version answers with its contract
            check_output(self.triton.infer(name, version, model_dir, WARMUP_TEXTS), manifest)

    def reject(self, name: str, registered: str, version: str, reason: str) -> None:
        """Out of Triton if it got there, its fetched files deleted, `rejected` in the state with a reason that names
        no path of this host, tagged `deployment=rejected` in the registry."""
        log.error("endpoint '%s': version %s of '%s' rejected: %s", name, version, registered, reason)
        reason = public_reason(reason)
        shutil.rmtree(version_root(self.settings.models_dir, name, version), ignore_errors=True)
        self.take_out(name, version)
        self.store.update(lambda s: transitions.reject(s, name, version, reason))
        self.registry.tag(registered, version, {"deployment": transitions.REJECTED, "deployment.reason": reason})

    def take_out(self, name: str, version: str) -> None:
        """A rejected version out of Triton, if it got there."""
        if self.triton.placed(name, version):
            self.triton.remove(name, version)
            try:
                self.triton.load(name)
            except ServingError as exc:
                log.warning("endpoint '%s': reload after removing version %s failed: %s", name, version, exc)


class ReplicaDeployer(Deployer):
    """Auto-update by the agents beside the Triton replicas (CONTROLLER_PLACEMENT=agents): the controller checks each
    version and makes it live once every replica holds it; it touches no Triton."""

    def __init__(
        self,
        settings: ControllerSettings,
        store: DeploymentStore,
        registry: Registry,
        triton: TritonControl,
        clock: Callable[[], float],
        forward: Forward | None = None,
    ):
        super().__init__(settings, store, registry, triton, clock, forward)
        self.waiting: dict[tuple[str, str], list[str]] = {}
        """The replicas each checked version was last said to wait for."""

    def deploy(self, name: str, version: str) -> None:
        """A version not yet verified is fetched and checked (rejected if it fails), then recorded as verified for the
        agents; a verified one goes live once every replica holds it ready."""
        endpoint = self.store.endpoint(name)
        if endpoint is None or version not in endpoint.versions:  # removed meanwhile
            return
        record, registered = endpoint.versions[version], endpoint.registered_name or name
        if not record.verified():
            self.check_for_replicas(name, registered, version, endpoint)
            return
        now = self.clock()
        replicas = self.store.replicas(now, self.settings.replica_ttl)
        if not placement.ready_everywhere(replicas, name, version):
            lacking = placement.lacking(replicas, name, version) if replicas else ["(no replica has reported)"]
            if self.waiting.get((name, version)) != lacking:  # said when it changes, not every tick
                log.info("endpoint '%s': version %s waits for replicas %s", name, version, lacking)
                self.waiting[(name, version)] = lacking
            return
        self.waiting.pop((name, version), None)
        model_dir = artifact_dir(self.settings.models_dir, name, version)
        if not (model_dir / MANIFEST_FILE).is_file():  # fetched by a controller before this one (another host)
            model_dir = self.registry.fetch(registered, version, version_root(self.settings.models_dir, name, version))
        manifest = Manifest.load(model_dir)
        try:  # again: a version made live since this one was checked may have fixed the endpoint's contract
            check_contract(endpoint, manifest)
        except ValueError as exc:
            self.reject(name, registered, version, str(exc)[:500])
            return
        self.go_live(
            name, registered, version, model_dir, record.lineage, manifest, now, f" on replicas {list(replicas)}"
        )

    def check_for_replicas(self, name: str, registered: str, version: str, endpoint: EndpointState) -> None:
        """The checks of `Deployer.deploy` short of Triton: passed, the version is recorded as verified (still
        `loading`) and the agents load it; failed, it is rejected before any replica does."""
        model_dir = self.fetch(name, registered, version)
        if model_dir is None:
            return
        try:
            self.verify(endpoint, model_dir)
        except Exception as exc:  # noqa: BLE001 - whatever the version does wrong (ONNX Runtime errors included)
            self.reject(name, registered, version, str(exc).strip()[:500])
            return
        lineage = self.registry.lineage(registered, version, model_dir)
        self.write_reference(name, version, model_dir, lineage)
        self.store.update(
            lambda s: transitions.mark_verified(s, name, version, model_dir=str(model_dir), lineage=lineage)
        )
        log.info("endpoint '%s': version %s of '%s' checked; the replicas load it next", name, version, registered)

    def take_out(self, name: str, version: str) -> None:
        """Nothing to do here: the agents unload a version the state no longer wants (`placement.wanted`)."""

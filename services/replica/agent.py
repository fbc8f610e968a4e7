"""The replica agent (`serving triton-agent`): keeps one Triton replica holding every version the deployment state
wants on replicas, and tells the shared store which versions it holds ready.

Each Triton replica has its own agent, its own repository and its own copy of each version, fetched from the
registry over the network (MLflow's tracking server with `--serve-artifacts`: no volume is shared between hosts).
Once a second (`AgentSettings.interval`) the agent reads the state, places and loads the versions it lacks
(`placement.wanted`: live, verified by the controller and still loading, or still draining), removes the others,
warms every newly ready version up (the controller's check through Triton: the warm-up texts, the manifest's output
shape, finite values) and reports the ready ones (`DeploymentStore.report_replica`); the controller makes a version
live once every replica that reported lately holds it (CONTROLLER_PLACEMENT=agents).

Before its Triton starts (`prepare`, run by `agent_host` before each start of the server) the agent places every
live version, so Triton loads them all before it opens its ports: a joining or restarted replica cannot be reached
by the gateways' round-robin before it holds what they route to. It reports itself (holding nothing) before that, so
no version goes live without it while it starts. While its Triton is down or wedged (it does not answer within its
timeouts) the agent says so once and reports nothing, so the replica drops out of the controller's count after
CONTROLLER_REPLICA_TTL instead of holding new versions back for good. `probe_target`, a version that answered its
check here, is what the supervisor's liveness probe of the agent's own Triton infers on.

While the registry does not answer (asked once a tick, said once: `RegistryWatch`) the replica keeps serving what it
holds, and the versions whose files it lacks wait for it; those it has on disk intact are placed again without it.

A version's files are fetched into and removed from `<models_dir>/<endpoint>/<version>` (`model_dirs`, each name one
path segment inside the models directory), never at a path the state names.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from services.common.contract import MANIFEST_FILE, WARMUP_TEXTS, Manifest, verify_as_checked
from services.common.errors import ConfigurationError, ServingError, Unavailable
from services.lifecycle import placement
from services.lifecycle.checks import check_output
from services.lifecycle.deployments import EndpointState, Phase
from services.lifecycle.model_dirs import artifact_dir, version_root
from services.lifecycle.ports import Registry, TritonControl
from services.lifecycle.registry_watch import RegistryWatch
from services.lifecycle.store import DeploymentStore
from services.replica.plan import Change, plan, registered_names

log = logging.getLogger("triton-agent")


class ReplicaTriton(TritonControl, Protocol):
    """`services.triton.model_control.TritonModels`, as the agent uses it: the controller's `TritonControl` and a
    look at the whole repository and at what the server holds ready."""

    def placed_versions(self) -> dict[str, list[str]]: ...

    def forget(self, model: str) -> None: ...

    def server_live(self) -> bool: ...

    def ready_versions(self) -> dict[str, list[str]]: ...


class ReplicaAgent:
    def __init__(
        self,
        store: DeploymentStore,
        registry: Registry,
        triton: ReplicaTriton,
        *,
        replica: str,
        models_dir: Path,
        max_backoff: float = 30.0,
        clock: Callable[[], float] = time.time,
    ):
        self.store, self.registry, self.triton = store, registry, triton
        self.replica, self.models_dir, self.max_backoff, self.clock = replica, Path(models_dir), max_backoff, clock
        self.checked: set[tuple[str, str]] = set()
        """Versions warmed up and checked since Triton last loaded them: the ones reported."""
        self.failed: dict[tuple[str, str], tuple[int, float]] = {}
        """Versions that failed to fetch, load or answer here: failures so far, and when they are tried again."""
        self.answering: set[tuple[str, str]] = set()
        """Checked versions that passed their check here (a live one that failed it is kept, and not in here)."""
        self.probe_target: tuple[str, str] | None = None
        """The newest version Triton holds that answered here (model, version; the last to be drained): the liveness
        probe's; None: none yet."""
        self.triton_answers = True
        self.registry_watch = RegistryWatch(
            registry, log, "this replica keeps serving the versions it holds; the ones it lacks wait", clock
        )

    # --- before Triton starts -------------------------------------------------------------------------------------
    def prepare(self) -> list[str]:
        """Place every live version (fetched first where missing) and remove every other deployed version, before
        Triton starts; returns the models Triton is to load at its start. Raises when a live version cannot be
        fetched: the server must not open its ports without it. The replica reports first that it holds nothing yet,
        so a version checked meanwhile waits for it (for CONTROLLER_REPLICA_TTL) instead of going live without it."""
        self.store.report_replica(self.replica, {}, self.clock())
        endpoints = self.store.read().endpoints
        wanted = {name: placement.wanted_at_start(item) for name, item in endpoints.items()}
        registered = registered_names(endpoints)
        for model, change in plan(wanted, self.triton.placed_versions()).items():
            for version in change.add:
                self.place(model, registered[model], version, recorded(endpoints, model, version))
            self.drop(model, change.drop)
        self.checked.clear()
        return sorted(model for model, versions in self.triton.placed_versions().items() if versions)

    # --- while Triton runs ----------------------------------------------------------------------------------------
    def tick(self) -> None:
        """One sync with the state and one report, when Triton answers; else nothing (the report ages out)."""
        self.registry_watch.check()
        if not self.triton.server_live():
            if self.triton_answers:
                log.warning("Triton does not answer (down, starting or wedged): %s reports nothing", self.replica)
            self.triton_answers, self.probe_target = False, None
            self.checked.clear()
            return
        if not self.triton_answers:
            log.info("Triton answers again")
            self.triton_answers = True
        endpoints = self.store.read().endpoints
        self.sync(endpoints)
        self.report(endpoints)

    def sync(self, endpoints: dict[str, EndpointState]) -> None:
        """Place and load the wanted versions this replica does not serve; unload and remove the ones no longer
        wanted. A version that failed here sits out its backoff (and is removed meanwhile)."""
        now = self.clock()
        wanted = {
            name: [v for v in placement.wanted(item) if self.failed.get((name, v), (0, 0.0))[1] <= now]
            for name, item in endpoints.items()
        }
        registered = registered_names(endpoints)
        loadable = {name: placement.to_load(item) for name, item in endpoints.items()}
        for model, change in plan(wanted, self.triton.placed_versions(), self.triton.ready_versions()).items():
            add = [v for v in change.add if v in loadable.get(model, [])]  # a draining version is not loaded again
            if add or change.drop:
                recorded_hashes = {v: recorded(endpoints, model, v) for v in add}
                self.apply(model, registered.get(model, model), Change(add, change.drop), recorded_hashes)

    def apply(self, model: str, registered: str, change: Change, recorded_hashes: dict[str, dict | None]) -> None:
        added = []
        for version in change.add:
            if not (self.registry_watch.up or intact(self.version_dir(model, version))):
                continue  # its files are to be fetched: it waits for the registry (said once, by the watch)
            try:
                self.place(model, registered, version, recorded_hashes.get(version))
                added.append(version)
            except Exception as exc:  # noqa: BLE001 - registry away or a broken upload: this version waits
                self.fail(model, version, f"could not be fetched: {exc}")
        for version in change.drop:
            self.triton.remove(model, version)
        if not self.triton.placed_versions().get(model) and not change.drop:
            return  # nothing was placed and nothing is loaded
        try:
            self.triton.load(model)  # Unavailable (Triton away) goes up: the next tick tries again
        except ConfigurationError as exc:  # Triton refused the model with the new versions: take them out again
            for version in added:
                self.fail(model, version, f"Triton refused to load it: {exc}")
                self.triton.remove(model, version)
            if added:
                self.triton.load(model)
        self.drop(model, change.drop)
        if added or change.drop:
            log.info("'%s': placed %s, removed %s", model, added or "none", change.drop or "none")

    def report(self, endpoints: dict[str, EndpointState]) -> None:
        """Warm up the versions that became ready, then report every ready one still wanted."""
        ready = self.triton.ready_versions()
        held = {(model, version) for model, versions in ready.items() for version in versions}
        self.checked &= held  # a version Triton lost (it restarted) is checked again once it is back
        self.answering &= held
        report: dict[str, list[str]] = {}
        for name, item in endpoints.items():
            for version in placement.wanted(item):
                if (name, version) not in held:
                    continue
                loading = item.versions[version].state == Phase.LOADING
                if (name, version) in self.checked or self.check(name, version, strict=loading):
                    report.setdefault(name, []).append(version)
        self.probe_target = max(self.answering, key=lambda held: (held[0], int(held[1])), default=None)
        self.store.report_replica(self.replica, report, self.clock())

    def check(self, model: str, version: str, *, strict: bool) -> bool:
        """The warm-up texts through the loaded version, three times (warm-up, and proof that it answers with its
        contract). `strict` (a version not live yet): one that fails is taken out of this replica and tried again
        later. Else (the gateways route to it already) a failure is said and the version kept: taking it out would
        fail every request routed here."""
        model_dir = self.version_dir(model, version)
        try:
            manifest = Manifest.load(model_dir)
            for _ in range(3):
                check_output(self.triton.infer(model, version, model_dir, WARMUP_TEXTS), manifest)
        except Unavailable:
            raise  # Triton away: not the version's fault
        except (ServingError, ValueError) as exc:
            if not strict:
                log.warning("live version %s of '%s' failed its warm-up here (kept): %s", version, model, exc)
                self.checked.add((model, version))
                return True
            self.fail(model, version, f"failed its check through Triton: {exc}")
        else:
            self.checked.add((model, version))
            self.answering.add((model, version))
            self.failed.pop((model, version), None)
            return True
        self.triton.remove(model, version)
        self.triton.load(model)
        return False

    # --- files ----------------------------------------------------------------------------------------------------
    def version_dir(self, model: str, version: str) -> Path:
        return artifact_dir(self.models_dir, model, version)

    def place(self, model: str, registered: str, version: str, recorded: dict[str, str] | None) -> None:
        """The version's files from the registry (kept from an earlier fetch when intact), into the repository: only
        the bytes the controller checked (`recorded`: the hashes in the version's lineage)."""
        root, model_dir = version_root(self.models_dir, model, version), self.version_dir(model, version)
        what = f"version {version} of '{model}'"
        if not intact(model_dir):
            model_dir = self.registry.fetch(registered, version, root)
            Manifest.load(model_dir).verify_files(model_dir)
        try:
            verify_as_checked(model_dir, recorded, what)
        except ConfigurationError:
            shutil.rmtree(root, ignore_errors=True)  # changed in the registry after its check: not kept
            raise
        self.triton.place(model, version, model_dir)

    def drop(self, model: str, versions: list[str]) -> None:
        """Removed versions' files go; a model left without versions leaves the repository (config and all)."""
        for version in versions:
            self.triton.remove(model, version)
            shutil.rmtree(version_root(self.models_dir, model, version), ignore_errors=True)
            self.checked.discard((model, version))
        if versions and not self.triton.placed_versions().get(model):
            self.triton.forget(model)

    def fail(self, model: str, version: str, reason: str) -> None:
        count = self.failed.get((model, version), (0, 0.0))[0] + 1
        delay = min(self.max_backoff, 2.0**count)
        self.failed[(model, version)] = (count, self.clock() + delay)
        log.error("version %s of '%s' %s; trying again in %.0fs", version, model, reason, delay)


def recorded(endpoints: dict[str, EndpointState], model: str, version: str) -> dict[str, str] | None:
    """The hashes the controller recorded for `version` of endpoint `model` when it checked it (its lineage)."""
    record = endpoints[model].versions.get(version) if model in endpoints else None
    return record.lineage.get("artifacts") if record is not None else None


def intact(model_dir: Path) -> bool:
    """A fetched copy whose files all match its manifest."""
    if not (model_dir / MANIFEST_FILE).is_file():
        return False
    try:
        Manifest.load(model_dir).verify_files(model_dir)
    except (ConfigurationError, ValueError, OSError):
        return False
    return True

"""Every rule that changes the deployment state, as a function of the state: no file, registry, Triton or clock
(the time is an argument), so each rule is tested on its own and lives in one place.

The admin API and the controller apply them under the state's lock, `store.update(lambda s: transitions.x(s, ...))`;
a refusal raises NotFound, Conflict or InvalidInput (the admin API's 404, 409 and 422), and `update` then writes
nothing. The questions the controller asks on a plain read before it takes the lock (anything to discover, to drain,
to unload?) are functions here too; discovery and pruning ask theirs again on the state they change, so a change the
admin API made in between is not overwritten, and a rollout ends only if it is still running.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from services.common.contract import Manifest
from services.common.errors import Conflict, InvalidInput, NotFound
from services.common.names import check_name
from services.lifecycle.deployments import (
    Deployments,
    EndpointState,
    Phase,
    Rollout,
    RolloutPolicy,
    RolloutStatus,
    VersionState,
)
from services.lifecycle.routing import effective_weights
from services.triton.repository import MODELS

if TYPE_CHECKING:
    from services.lifecycle.ports import RegistryVersion

REJECTED = Phase.REJECTED.value
"""One word for a version that must never (again) get traffic: its phase, its registry tag (`deployment=rejected`
when a deployment check failed, `rollout=rejected` when a rollout rolled it back) and the controller's log."""


def endpoint(state: Deployments, name: str) -> EndpointState:
    if name not in state.endpoints:
        raise NotFound(f"no deployed endpoint '{name}'; deployed: {', '.join(sorted(state.endpoints)) or 'none'}")
    return state.endpoints[name]


# --- what the admin API asks for ----------------------------------------------------------------------------------
def set_auto_update(
    state: Deployments, name: str, registered_name: str, max_versions: int, rollout_policy: RolloutPolicy | None = None
) -> None:
    """Deploy every new version of `registered_name` to endpoint `name` (created if new), keeping `max_versions`,
    each rolled out under `rollout_policy` when another version serves (None: it takes all traffic once live).
    The only rule that creates an endpoint, so the one that checks its name (it becomes a Triton model directory)."""
    check_name(name)
    if name in MODELS:
        raise InvalidInput(f"'{name}' names a model of the built-in stack; choose another endpoint name")
    item = state.endpoints.setdefault(name, EndpointState())
    if item.registered_name != registered_name:
        item.removed = []  # removals were of the other model's versions
    item.registered_name, item.max_versions, item.rollout_policy = registered_name, max_versions, rollout_policy


def canary(state: Deployments, name: str, weights: list[float], versions: list[str] | None = None) -> dict[str, float]:
    """Split traffic by weight: over the given live `versions`, or (versions None) over the newest live versions,
    newest first. A running rollout gives way. Returns the resulting shares."""
    item = endpoint(state, name)
    if versions is not None:
        for version in versions:
            if version not in item.versions or item.versions[version].state != Phase.LIVE:
                raise Conflict(not_live(item, name, version))
        item.weights, item.newest_weights = dict(zip(versions, weights, strict=True)), []
    else:
        item.weights, item.newest_weights = {}, list(weights)
    if (rollout := item.running_rollout()) is not None:
        rollout.status, rollout.outcome = RolloutStatus.ROLLED_BACK, "replaced by a canary split"
    return effective_weights(item)


def start_rollout(state: Deployments, name: str, version: str, **policy: Any) -> Rollout:
    """Move traffic to `version` step by step, judged against the version that has most traffic now (the stable one).
    `policy`: the `Rollout` fields steps, dwell, max_error_rate, max_p99_ratio, min_requests. Any canary split
    ends: the rollout decides the shares."""
    item = endpoint(state, name)
    target = item.versions.get(version)
    if target is None or target.state not in (Phase.LIVE, Phase.LOADING):
        raise Conflict(not_live(item, name, version))
    shares = effective_weights(item)
    stable = max((v for v in shares if v != version), key=lambda v: shares[v], default=None)
    if stable is None:
        others = [v for v in item.live() if v != version]
        fix = (
            f"give the one it replaces its traffic back first: `serving model canary {name} --versions {others[0]} "
            "--weights 1`"
            if others
            else f"`serving model redeploy {name} --version N` brings a rejected or removed version back"
        )
        raise Conflict(
            f"'{name}' has no other version taking traffic to compare version {version} with "
            f"(live: {', '.join(item.live()) or 'none'}); {fix}"
        )
    item.rollout = Rollout(version=version, stable=stable, **policy)
    item.weights, item.newest_weights = {}, []
    return item.rollout


def redeploy(state: Deployments, name: str, version: str) -> None:
    """Deploy again a version that was rejected (by a check or a rollout) or removed: it is `loading` again, and the
    controller fetches, checks and loads it as a new one; auto-update no longer skips it."""
    item = endpoint(state, name)
    record = item.versions.get(version)
    if record is None and version not in item.removed:
        known = sorted({*item.versions, *item.removed}, key=int)
        raise NotFound(
            f"'{name}' never had version {version} (it had {known or 'none'}); the controller deploys new registry "
            f"versions itself (`serving model auto-update {name} --name MODEL`)"
        )
    if record is not None and record.state in (Phase.LIVE, Phase.LOADING):
        raise Conflict(f"version {version} of '{name}' is {record.state} already: nothing to deploy again")
    item.versions[version] = VersionState(version=version)
    if version in item.removed:
        item.removed.remove(version)


def not_live(item: EndpointState, name: str, version: str) -> str:
    """Why `version` cannot take traffic, and what to do about it."""
    record = item.versions.get(version)
    live = f"live: {item.live() or 'none'}"
    if record is None and version not in item.removed:
        return f"'{name}' has no version {version} ({live}); `serving model list {name}` shows its versions"
    if record is None or record.state in (Phase.REJECTED, Phase.DRAINING):
        why = "removed" if record is None or record.state == Phase.DRAINING else f"rejected ({record.reason})"
        return (
            f"version {version} of '{name}' is {why}, not live ({live}); deploy it again first: "
            f"`serving model redeploy {name} --version {version}`"
        )
    return f"version {version} of '{name}' is still loading ({live}); try again once it is live"


def remove(state: Deployments, name: str, version: str, now: float) -> None:
    """Take `version` out of traffic now; the controller unloads it once it has drained."""
    item = endpoint(state, name)
    if version not in item.versions:
        raise NotFound(f"'{name}' has no version {version}")
    item.versions[version].state, item.versions[version].drain_started = Phase.DRAINING, now
    item.weights.pop(version, None)
    if version not in item.removed:
        item.removed.append(version)  # once drained and forgotten, discovery must not bring it back


# --- what the controller finds ------------------------------------------------------------------------------------
def discoverable(item: EndpointState, registry_versions: Iterable[RegistryVersion]) -> list[str]:
    """Registry versions newer than every version the endpoint has, not tagged rejected and not removed by the
    user: the newest `max_versions` of them (older ones would be drained at once)."""
    newest_known = max((int(v) for v in item.versions), default=0)
    new = [
        v.version
        for v in registry_versions
        if int(v.version) > newest_known and v.tags.get("deployment") != REJECTED and v.version not in item.removed
    ]
    return new[-item.max_versions :] if new else []


def add_discovered(state: Deployments, name: str, registry_versions: Iterable[RegistryVersion]) -> list[str]:
    """Add the discoverable versions as `loading` (the controller deploys them next); returns them."""
    item = endpoint(state, name)
    new = discoverable(item, registry_versions)
    for version in new:
        item.versions.setdefault(version, VersionState(version=version))
    return new


def mark_live(
    state: Deployments, name: str, version: str, *, model_dir: str, lineage: dict, manifest: Manifest, now: float
) -> bool:
    """`version` passed every check: it gets traffic by the policy. The first live version fixes the endpoint's
    tensor contract. False, and nothing changes, when it is no longer loading: removed (`serving model remove`) or
    gone while the controller deployed it."""
    item = endpoint(state, name)
    record = item.versions.get(version)
    if record is None or record.state != Phase.LOADING or version in item.removed:
        return False
    serving = effective_weights(item)
    record.state, record.model_dir, record.deployed_at = Phase.LIVE, model_dir, _iso(now)
    record.lineage = lineage
    if not item.contract_outputs:
        item.contract_inputs, item.contract_outputs = manifest.inputs, manifest.outputs
    if item.rollout_policy is not None and serving and all(int(version) > int(v) for v in serving):
        _roll_out_arrival(item, item.rollout_policy, version, max(serving, key=lambda v: serving[v]))
    return True


def _roll_out_arrival(item: EndpointState, policy: RolloutPolicy, version: str, stable: str) -> None:
    """The endpoint's rollout `policy` moves traffic to `version`, newer than all that serve, from `stable`, the
    version with most traffic; a rollout under way gives way to it (as Flagger restarts its analysis on a new
    revision)."""
    if (running := item.running_rollout()) is not None:
        running.status = RolloutStatus.ROLLED_BACK
        running.outcome = f"replaced by the rollout of version {version}"
    item.rollout = Rollout(version=version, stable=stable, **policy.model_dump())
    item.weights, item.newest_weights = {}, []


def mark_verified(state: Deployments, name: str, version: str, *, model_dir: str, lineage: dict) -> None:
    """CONTROLLER_PLACEMENT=agents: `version` passed the controller's checks and stays `loading` with its lineage
    (`VersionState.verified`); the replicas' agents load it now, and `mark_live` follows once every replica holds it
    (`placement`)."""
    record = endpoint(state, name).versions.get(version)
    if record is not None and record.state == Phase.LOADING:
        record.model_dir, record.lineage = model_dir, lineage


def reject(state: Deployments, name: str, version: str, reason: str) -> None:
    """`version` failed a deployment check: never given traffic (the controller already took it out of Triton)."""
    record = endpoint(state, name).versions.get(version)
    if record is None:  # removed and forgotten meanwhile
        return
    record.state, record.reason, record.drain_started = Phase.REJECTED, reason, None


def to_retire(item: EndpointState) -> list[str]:
    """Live versions beyond the newest `max_versions` that no canary split and no running rollout uses."""
    keep = set(item.live()[: item.max_versions]) | set(item.weights)
    if (rollout := item.running_rollout()) is not None:
        keep |= {rollout.version, rollout.stable}
    return [v for v in item.live() if v not in keep]


def prune(state: Deployments, name: str, now: float) -> list[str]:
    """Start draining the versions `to_retire`; returns them."""
    item = endpoint(state, name)
    retire = to_retire(item)
    for version in retire:
        item.versions[version].state, item.versions[version].drain_started = Phase.DRAINING, now
    return retire


CLOCK_SKEW = 300.0
"""Seconds a time in the state may lie ahead of a host's clock and still be waited for (clocks differ by less)."""


def due_for_unload(item: EndpointState, now: float, drain_seconds: float) -> list[str]:
    """Versions draining out (`VersionState.draining_out`: draining, or rejected by a rollout) for `drain_seconds`
    at least, or since a time more than `CLOCK_SKEW` ahead of `now` (a clock set back, or a state written so: waiting
    for it could hold the version for ever), or a draining one without a start (a written state). A start a little
    ahead (another host's clock) drains its full time from then."""
    return [
        v
        for v, record in item.versions.items()
        if record.draining_out()
        and (
            record.drain_started is None
            or now - record.drain_started >= drain_seconds
            or record.drain_started - now > CLOCK_SKEW
        )
    ]


def finish_drained(state: Deployments, name: str, unloaded: Iterable[str]) -> list[str]:
    """The `unloaded` versions are out of Triton: a drained one is forgotten, a rejected one is kept (with its
    reason) as no longer draining. Returns the forgotten ones, whose fetched files can go."""
    item = endpoint(state, name)
    forgotten = []
    for version in unloaded:
        record = item.versions.get(version)
        if record is None:
            continue
        if record.state == Phase.DRAINING:
            del item.versions[version]
            forgotten.append(version)
        else:
            record.drain_started = None
    return forgotten


def _iso(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))

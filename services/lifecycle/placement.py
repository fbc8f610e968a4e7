"""CONTROLLER_PLACEMENT=agents: which versions every Triton replica holds, and when a version is ready on all of
them. Pure rules over the deployment state and the replicas' reports (`DeploymentStore.replicas`), kept apart from
`transitions` (which change the state) but written the same way: no store, registry, Triton or clock.

The controller checks a new version as in local placement, then records it as verified (`transitions.mark_verified`,
still `loading`: `VersionState.verified`); each replica's agent (`services.replica.agent`) loads the versions
`wanted` by every endpoint and reports those its Triton holds ready; the controller makes the version live once
`ready_everywhere` says so.
"""

from __future__ import annotations

from services.lifecycle.deployments import EndpointState, Phase

Replicas = dict[str, dict[str, list[str]]]
"""What `DeploymentStore.replicas` answers: replica -> endpoint -> versions its Triton holds ready."""


def to_load(item: EndpointState) -> list[str]:
    """Versions a replica loads when it lacks them, oldest first: the live ones and the verified loading ones."""
    return sorted(
        (v for v, record in item.versions.items() if record.state == Phase.LIVE or record.verified()), key=int
    )


def wanted(item: EndpointState) -> list[str]:
    """Versions a replica holds now, oldest first: `to_load`, and the ones taken out of traffic that have not drained
    yet (requests routed before the change may still reach them; kept where they are, never loaded again)."""
    draining = [version for version, record in item.versions.items() if record.draining_out()]
    return sorted([*to_load(item), *draining], key=int)


def wanted_at_start(item: EndpointState) -> list[str]:
    """What a replica places before its Triton starts, which Triton then loads before it opens its ports: the live
    versions (every one the gateways route to). The others follow through Triton's API once it is up, so a version
    that fails to load cannot keep the server from starting."""
    return sorted(item.live(), key=int)


def lacking(replicas: Replicas, name: str, version: str) -> list[str]:
    """The replicas (of those that reported lately) whose Triton does not hold `version` of endpoint `name` ready."""
    return sorted(replica for replica, held in replicas.items() if version not in held.get(name, []))


def ready_everywhere(replicas: Replicas, name: str, version: str) -> bool:
    """The gate from `loading` to `live`: at least one replica reported lately, and every one of them holds it."""
    return bool(replicas) and not lacking(replicas, name, version)

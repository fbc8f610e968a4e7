"""What a replica's agent changes, decided from what the state wants and what the replica holds: pure functions,
no store, registry or Triton (`services.replica.agent` acts on them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.lifecycle.deployments import EndpointState


@dataclass(frozen=True)
class Change:
    """What one endpoint's model needs: versions to place and load, versions to remove."""

    add: list[str] = field(default_factory=list)
    drop: list[str] = field(default_factory=list)


def plan(
    wanted: dict[str, list[str]], placed: dict[str, list[str]], served: dict[str, list[str]] | None = None
) -> dict[str, Change]:
    """Per model, the versions to add and to drop, oldest first; a model with nothing to change is left out. Pure:
    the agent's whole sync decision. Added: the wanted versions Triton does not serve (`served`; before Triton
    runs, the ones not placed), so a placed version Triton lost or failed to load is placed and loaded again.
    Dropped: the placed versions no longer wanted."""
    changes = {}
    served = placed if served is None else served
    for model in sorted(set(wanted) | set(placed)):
        want, have, serving = set(wanted.get(model, [])), set(placed.get(model, [])), set(served.get(model, []))
        change = Change(sorted(want - serving, key=int), sorted(have - want, key=int))
        if change.add or change.drop:
            changes[model] = change
    return changes


def registered_names(endpoints: dict[str, EndpointState]) -> dict[str, str]:
    """The registered model each endpoint's versions are fetched from."""
    return {name: item.registered_name or name for name, item in endpoints.items()}

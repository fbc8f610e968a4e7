"""Traffic policy: which live version answers a request. Pure functions, used by the gateway's workers."""

from __future__ import annotations

import hashlib
import random

from services.lifecycle.state import EndpointState


def effective_weights(endpoint: EndpointState) -> dict[str, float]:
    """Share of traffic per live version, summing to 1 (empty when nothing is live).

    In order: a running rollout (its step's share for the new version, the rest for the stable one); an explicit
    canary split by version; a canary split over the newest live versions; else the newest live version alone.
    Versions that are not live never get traffic, and shares of the missing ones go to the others."""
    live = endpoint.live()
    if not live:
        return {}
    rollout = endpoint.rollout
    if rollout and rollout.status == "running" and {rollout.version, rollout.stable} <= set(live):
        share = rollout.steps[min(rollout.step, len(rollout.steps) - 1)] / 100
        weights = {rollout.version: share, rollout.stable: 1 - share}
    elif endpoint.weights:
        weights = {v: w for v, w in endpoint.weights.items() if v in live}
    elif endpoint.newest_weights:
        weights = dict(zip(live, endpoint.newest_weights, strict=False))
    else:
        weights = {live[0]: 1.0}
    total = sum(w for w in weights.values() if w > 0)
    if total <= 0:
        return {live[0]: 1.0}
    return {v: w / total for v, w in weights.items() if w > 0}


def key_point(key: str) -> float:
    """A stable point in [0, 1) for a caller's key: the same key lands on the same version."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") / 2**64


def pick(weights: dict[str, float], routing_key: str | None = None) -> str:
    """The version for one request: by the caller's key when given (sticky), else at random by weight."""
    point = key_point(routing_key) if routing_key else random.random()
    cumulative = 0.0
    for version, weight in sorted(weights.items(), key=lambda item: int(item[0])):
        cumulative += weight
        if point < cumulative:
            return version
    return max(weights, key=int)

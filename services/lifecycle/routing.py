"""Traffic policy: which live version answers a request. Pure functions, used by the gateway's workers; the
precedence (`governing`) is the one rule both the shares (`effective_weights`) and their explanation
(`services.lifecycle.shares`) follow."""

from __future__ import annotations

import hashlib
import random
from enum import StrEnum

from services.lifecycle.deployments import EndpointState


class Precedence(StrEnum):
    """What decides an endpoint's traffic shares: the first that applies, in this order."""

    ROLLOUT = "rollout"
    """A running rollout whose new and stable versions are both live: its step's share to the new version, the rest
    to the stable one."""
    BY_VERSION = "by version"
    """A canary split by version (`weights`), or the pin a finished rollout left."""
    NEWEST_SPLIT = "newest split"
    """A canary split over the newest live versions (`newest_weights`), newest first."""
    NEWEST = "newest"
    """The newest live version takes all."""


def governing(endpoint: EndpointState, live: list[str]) -> Precedence:
    """What decides the shares of `endpoint`, whose live versions are `live` (not empty)."""
    rollout = endpoint.running_rollout()
    if rollout is not None and {rollout.version, rollout.stable} <= set(live):
        return Precedence.ROLLOUT
    if endpoint.weights:
        return Precedence.BY_VERSION
    if endpoint.newest_weights:
        return Precedence.NEWEST_SPLIT
    return Precedence.NEWEST


def effective_weights(endpoint: EndpointState) -> dict[str, float]:
    """Share of traffic per live version, summing to 1 (empty when nothing is live), by the precedence that governs
    (`governing`). Versions that are not live never get traffic, and shares of the missing ones go to the others."""
    live = endpoint.live()
    if not live:
        return {}
    rule, rollout = governing(endpoint, live), endpoint.running_rollout()
    if rule == Precedence.ROLLOUT and rollout is not None:
        share = rollout.share() / 100
        weights = {rollout.version: share, rollout.stable: 1 - share}
    elif rule == Precedence.BY_VERSION:
        weights = {v: w for v, w in endpoint.weights.items() if v in live}
    elif rule == Precedence.NEWEST_SPLIT:
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

"""Why each version of an endpoint gets the traffic share it gets, in words (`serving model list`'s "why" column):
the precedence that governs `routing.effective_weights` (`routing.governing`), told version by version; and, where
shares are fixed by version, the command that hands traffic back to the newest live version."""

from __future__ import annotations

from services.lifecycle.deployments import EndpointState, Phase, RolloutPolicy, RolloutStatus
from services.lifecycle.routing import Precedence, governing


def hand_back(name: str, endpoint: EndpointState) -> str | None:
    """The command that gives all traffic back to the newest live version, where a canary split or a finished
    rollout fixed the shares by version; None where the newest already gets it by default."""
    if not endpoint.weights or endpoint.running_rollout() is not None:
        return None
    return f"serving model canary {name} --newest 1 --weights 1"


def arrivals(policy: RolloutPolicy | None, pinned: bool = False) -> str:
    """What a new registry version gets once live, under auto-update's `policy` (None: no policy), while the shares
    are `pinned` by version (a canary split or a finished rollout) or not."""
    if policy is None and pinned:
        return (
            "go live at 0% while the shares are pinned by version (no rollout policy: `serving model auto-update "
            "--rollout` sets one)"
        )
    if policy is None:
        return "take all traffic once live (no rollout policy: `serving model auto-update --rollout` sets one)"
    steps = ",".join(map(str, policy.steps))
    return (
        f"rolled out while another version serves: steps {steps}%, dwell {policy.dwell:g} s, max error rate "
        f"{policy.max_error_rate:g}, max p99 ratio {policy.max_p99_ratio:g}, {policy.min_requests} requests a step"
    )


def share_reasons(name: str, endpoint: EndpointState) -> dict[str, str]:
    """version -> why it gets its share (or none)."""
    reasons = {}
    live = endpoint.live()
    for version, record in endpoint.versions.items():
        if record.state == Phase.LIVE:
            reasons[version] = _live_reason(name, endpoint, version, live)
        elif record.state == Phase.DRAINING:
            reasons[version] = "draining: no new traffic, unloaded after the drain period"
        elif record.state == Phase.LOADING:
            reasons[version] = "loading: no traffic until its checks pass"
        else:
            reasons[version] = f"rejected: no traffic; `serving model redeploy {name} --version {version}` retries it"
    return reasons


def _live_reason(name: str, endpoint: EndpointState, version: str, live: list[str]) -> str:
    rule, rollout = governing(endpoint, live), endpoint.running_rollout()
    if rule == Precedence.ROLLOUT and rollout is not None:
        step = f"step {rollout.step + 1} of {len(rollout.steps)}"
        if version == rollout.version:
            return f"rollout: {step}, {rollout.share()}% to it"
        if version == rollout.stable:
            rest = 100 - rollout.share()
            if not rest:
                return f"rollout: {step}, the stable version: no traffic at 100% (only errors are judged)"
            return f"rollout: {step}, the stable version keeps the rest ({rest}%)"
        return f"rollout of version {rollout.version} under way: none"
    if rule == Precedence.BY_VERSION:
        return _pinned(endpoint, version)
    if rule == Precedence.NEWEST_SPLIT:
        rank = live.index(version)
        if rank < len(endpoint.newest_weights):
            weight = endpoint.newest_weights[rank]
            place = "the newest" if rank == 0 else f"newest but {rank}"
            return f"canary over the newest {len(endpoint.newest_weights)}: {place}, weight {weight:g}"
        return f"canary over the newest {len(endpoint.newest_weights)}: not among them"
    if version == live[0]:
        return "newest live version: takes all"
    return f"older than version {live[0]}, the newest, which takes all"


def _pinned(endpoint: EndpointState, version: str) -> str:
    """Shares set by version: a canary split, or the pin a finished rollout left."""
    rollout = endpoint.rollout
    if rollout and rollout.status == RolloutStatus.PROMOTED and endpoint.weights == {rollout.version: 1.0}:
        pin = f"pinned by the promoted rollout of version {rollout.version}"
    elif rollout and rollout.status == RolloutStatus.ROLLED_BACK and endpoint.weights == {rollout.stable: 1.0}:
        pin = f"pinned by the rollback of version {rollout.version}"
    else:
        return "in the canary split" if version in endpoint.weights else "not in the canary split: none"
    return f"{pin}: takes all" if version in endpoint.weights else f"{pin}: none"

"""The rules that move a running rollout on, as functions of the deployment state (the controller applies them under
the state's lock, as every rule of `transitions`); a rollout that is no longer running is a Conflict."""

from __future__ import annotations

from services.common.errors import Conflict
from services.lifecycle.deployments import Deployments, Phase, Rollout, RolloutStatus
from services.lifecycle.transitions import endpoint


def start_rollout_step(state: Deployments, name: str, step: int, baseline: dict, now: float) -> None:
    """Step `step` starts now; `baseline` (a `windows.Snapshot`) is what its window is measured from."""
    rollout = _running(state, name)
    rollout.step, rollout.step_started, rollout.baseline, rollout.waiting = step, now, baseline, None


def note_waiting(state: Deployments, name: str, waiting: str) -> None:
    """The step's dwell is over and it waits for `waiting` (words: which requests it lacks)."""
    _running(state, name).waiting = waiting


def abandon_rollout(state: Deployments, name: str) -> str:
    """The new version was rejected at deployment: the rollout ends with traffic where it was. Returns the outcome."""
    rollout = _running(state, name)
    return _end(rollout, RolloutStatus.ROLLED_BACK, f"version {rollout.version} was rejected at deployment")


def promote(state: Deployments, name: str, numbers: dict) -> str:
    """The last step passed: the new version takes all traffic. Returns the outcome."""
    item = endpoint(state, name)
    rollout = _running(state, name)
    item.weights = {rollout.version: 1.0}
    return _end(rollout, RolloutStatus.PROMOTED, f"after {len(rollout.steps)} steps: {evidence(numbers)}")


def roll_back(state: Deployments, name: str, reason: str, numbers: dict, now: float) -> str:
    """A step failed: all traffic back to the stable version, the new one rejected and drained. Returns the outcome."""
    item = endpoint(state, name)
    rollout = _running(state, name)
    outcome = f"rolled back at {rollout.steps[rollout.step]}%: {reason} ({evidence(numbers)})"
    item.weights = {rollout.stable: 1.0}
    if rollout.version in item.versions:
        record = item.versions[rollout.version]
        record.state, record.reason, record.drain_started = Phase.REJECTED, outcome, now
    return _end(rollout, RolloutStatus.ROLLED_BACK, outcome)


def evidence(numbers: dict) -> str:
    """What a judgement rested on, in words (the registry's `rollout.numbers` tag keeps the numbers themselves)."""
    said = [f"{numbers.get('new_requests', 0):.0f} requests on the new version"]
    if numbers.get("stable_requests"):
        said[0] += f", {numbers['stable_requests']:.0f} on the stable one"
    if "new_error_rate" in numbers:
        said.append(f"error rate {numbers['new_error_rate']:.2%}")
    if "new_p99_ms" in numbers:
        said.append(f"p99 {numbers['new_p99_ms']:g} ms against {numbers.get('stable_p99_ms', 0):g} ms")
    return "; ".join(said)


def _running(state: Deployments, name: str) -> Rollout:
    rollout = endpoint(state, name).running_rollout()
    if rollout is None:
        raise Conflict(f"'{name}' has no running rollout")
    return rollout


def _end(rollout: Rollout, status: RolloutStatus, outcome: str) -> str:
    rollout.status, rollout.outcome, rollout.baseline, rollout.waiting = status, outcome, None, None
    return outcome

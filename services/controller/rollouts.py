"""Rollouts: each step's window is measured from the per-version counters summed over every gateway (a mark when the
step starts, kept in the state, and a reading after its dwell: `gateway_metrics`), judged by `rollouts.judge.judge`;
a step short of requests waits (what for is kept in the state, said at most every `WAITING_NOTE_SECONDS`), and the
rollout advances, promotes the new version (registry alias `champion`, tag `rollout=promoted`) or rolls back (all
traffic to the stable version, the new one rejected and tagged `rollout=rejected` with the numbers). A window that
Prometheus does not answer for (down, cut off) pauses the rollout where it is: no decision on numbers it cannot read,
said once at WARNING (and in `serving_rollouts_paused`), read again at each tick, and once read it carries on."""

from __future__ import annotations

import importlib
import json
import logging
import threading
from collections.abc import Callable

from services.common.errors import Unavailable
from services.lifecycle import transitions
from services.lifecycle.deployments import EndpointState, Phase, Rollout, RolloutStatus
from services.lifecycle.ports import GatewayMetrics, Registry
from services.lifecycle.rollouts import transitions as rollout_transitions
from services.lifecycle.rollouts.judge import Action, Decision, judge
from services.lifecycle.store import DeploymentStore

log = logging.getLogger("controller")
WAITING_NOTE_SECONDS = 5.0
"""Least time between two writes of what a waiting step lacks: its counts change every tick, the state need not."""


class Rollouts:
    def __init__(self, store: DeploymentStore, registry: Registry, metrics: GatewayMetrics, clock: Callable[[], float]):
        self.store, self.registry, self.metrics, self.clock = store, registry, metrics, clock
        self._noted: dict[str, float] = {}
        self.paused: set[str] = set()
        """Endpoints whose rollout waits for numbers Prometheus does not answer: `serving_rollouts_paused`."""
        # the judge's tests (scipy.stats: seconds of imports on a busy host) load beside the loop, not between a
        # window's reading and the decision on it, nor before the controller's first tick
        threading.Thread(target=importlib.import_module, args=("scipy.stats",), daemon=True).start()

    def advance_rollout(self, name: str) -> None:
        """Start the step's window, or judge it once its dwell is over and act on the decision."""
        endpoint = self.store.endpoint(name)
        if endpoint is None or (rollout := endpoint.running_rollout()) is None:
            return
        new = endpoint.versions.get(rollout.version)
        if new is None or new.state == Phase.REJECTED:
            outcome = self.store.update(lambda s: rollout_transitions.abandon_rollout(s, name))
            log.warning("endpoint '%s': rollout ended: %s", name, outcome)
            return
        if new.state != Phase.LIVE:
            return  # still loading
        now = self.clock()
        ahead = rollout.step_started is not None and rollout.step_started - now > transitions.CLOCK_SKEW
        if rollout.step_started is None or rollout.baseline is None or ahead:
            self._start_step(name, rollout.step)  # a step started far "later than now" (a clock set back) starts again
            return
        if now - rollout.step_started < rollout.dwell:
            return
        try:
            observed = self.metrics.window(name, rollout.baseline, rollout.step_started, now)
        except Unavailable as exc:  # Prometheus away: no numbers, no decision
            self._pause(name, rollout, str(exc))
            return
        self._resume(name, rollout)
        if observed is None:  # marked by another source (the settings changed): judge a fresh window
            self._start_step(name, rollout.step)
            return
        decision = judge(rollout, observed, waited=now - rollout.step_started - rollout.dwell)
        if decision.action == Action.WAIT:
            self._note_waiting(name, rollout.waiting, decision.reason, now)
            return
        if decision.action == Action.ROLLBACK:
            self._roll_back(name, endpoint, rollout.version, decision)
        elif rollout.step + 1 < len(rollout.steps):
            self._start_step(name, rollout.step + 1)
            log.info(
                "endpoint '%s': rollout of version %s passed %d%% %s; now %d%%",
                name,
                rollout.version,
                rollout.steps[rollout.step],
                decision.numbers,
                rollout.steps[rollout.step + 1],
            )
        else:
            self._promote(name, endpoint, rollout.version, decision)

    def _pause(self, name: str, rollout: Rollout, why: str) -> None:
        """Its numbers cannot be read: it neither promotes nor rolls back, tried again at the next tick; said once."""
        if name not in self.paused:
            log.warning(
                "endpoint '%s': rollout of version %s paused at %d%%, neither promoting nor rolling back until its "
                "numbers can be read: %s",
                name,
                rollout.version,
                rollout.steps[rollout.step],
                why,
            )
        self.paused.add(name)

    def _resume(self, name: str, rollout: Rollout) -> None:
        if name in self.paused:
            self.paused.discard(name)
            log.info(
                "endpoint '%s': rollout of version %s resumes at %d%%: its numbers can be read again",
                name,
                rollout.version,
                rollout.steps[rollout.step],
            )

    def _note_waiting(self, name: str, before: str | None, waiting: str, now: float) -> None:
        if before is not None and now - self._noted.get(name, 0.0) < WAITING_NOTE_SECONDS:
            return
        self._noted[name] = now
        self.store.update(lambda s: rollout_transitions.note_waiting(s, name, waiting))
        if before is None:
            log.info("endpoint '%s': rollout step past its dwell, %s", name, waiting)

    def _start_step(self, name: str, step: int) -> None:
        baseline, now = self.metrics.mark(name), self.clock()
        self.store.update(lambda s: rollout_transitions.start_rollout_step(s, name, step, baseline, now))

    def _roll_back(self, name: str, endpoint: EndpointState, version: str, decision: Decision) -> None:
        now = self.clock()
        outcome = self.store.update(
            lambda s: rollout_transitions.roll_back(s, name, decision.reason, decision.numbers, now)
        )
        log.warning("endpoint '%s': rollout of version %s %s", name, version, outcome)
        if endpoint.registered_name:
            tags = {
                "rollout": transitions.REJECTED,
                "rollout.reason": decision.reason,
                "rollout.numbers": json.dumps(decision.numbers),
            }
            self.registry.tag(endpoint.registered_name, version, tags)

    def _promote(self, name: str, endpoint: EndpointState, version: str, decision: Decision) -> None:
        outcome = self.store.update(lambda s: rollout_transitions.promote(s, name, decision.numbers))
        log.info("endpoint '%s': version %s %s", name, version, outcome)
        if endpoint.registered_name:
            self.registry.promote(endpoint.registered_name, version)
            self.registry.tag(endpoint.registered_name, version, {"rollout": RolloutStatus.PROMOTED.value})

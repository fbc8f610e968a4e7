"""The fleet's PostgreSQL (the deployment state of `conftest`'s fleet) stopped and started again under load, in the
middle of a rollout: no request fails (each gateway worker serves the last state it read); an admin change sent
meanwhile is refused with a 503 that says nothing was changed, with Retry-After, and nothing of it is in the store
afterwards; the controller keeps the rollout where it was and carries it on once the store is back. The test prints
its figures."""

from __future__ import annotations

import time

import httpx

from loadtest.sentences import short
from tests.integration.scaleout.conftest import ENDPOINT, TOKEN, Fleet
from tests.integration.scaleout.test_fleet_outages import LogSince, settled
from tests.support.traffic import Load

CALM = short(400, seed=31)
OUTAGE = 6.0
"""Seconds PostgreSQL stays down: longer than the rollout step's dwell, so the step would have been judged."""
POLICY = {"steps": [50, 100], "dwell": 3, "max_error_rate": 0.05, "max_p99_ratio": 5, "min_requests": 10}


def store_ready(fleet: Fleet, gateway: int) -> str:
    """What one gateway worker's /health/ready says of the state store (a new connection: any worker)."""
    return httpx.get(f"{fleet.gateway_urls[gateway]}/health/ready", timeout=10).json()["state_store"]


def test_postgres_restarted_under_load_fails_no_request_refuses_a_change_whole_and_the_rollout_carries_on(
    fleet: Fleet, tiny_model, postgres
):
    live = settled(fleet)
    if len(live) < 2:  # run alone: the fleet serves its first version only
        fleet.wait_state(fleet.publish(tiny_model), "live")
    old, new = fleet.live()[-2:]
    fleet.admin("PUT", f"/endpoints/{ENDPOINT}/canary", {"versions": [old], "weights": [1.0]})
    controller = LogSince(fleet.registry_host.log("controller"))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    change = {"name": "another-model", "max_versions": 3}
    with Load(fleet.gateway_urls, CALM, endpoint=ENDPOINT, clients=8, pause=0.03) as load:
        time.sleep(1.0)
        fleet.admin("POST", f"/endpoints/{ENDPOINT}/rollout", {"version": new, **POLICY})
        rollout = fleet.rollout_under_way()
        before = fleet.store.read().endpoints[ENDPOINT]
        postgres.stop()
        stopped_at = time.time()
        try:
            refused = [
                httpx.put(f"{url}/admin/endpoints/{ENDPOINT}/auto-update", json=change, headers=headers, timeout=30)
                for url in fleet.gateway_urls
            ]
            said = fleet.hosts.wait_for(
                "both gateways saying the store is unreachable",
                lambda: all(store_ready(fleet, g).startswith("unreachable") for g in (0, 1)) and time.time(),
                10,
            )
            time.sleep(max(0.0, stopped_at + OUTAGE - time.time()))
        finally:
            postgres.start()
        back_at = time.time()
        kept = fleet.store.read().endpoints[ENDPOINT]  # as the controller finds it once the store is back
        fleet.hosts.wait_for(
            "the controller reading the store again",
            lambda: any("readable again" in line for line in controller.lines()),
            30,
        )
        resumed_after = time.time() - back_at
        fleet.hosts.wait_for(
            "the promotion", lambda: fleet.store.read().endpoints[ENDPOINT].rollout.status == "promoted", 40
        )
        promoted_after = time.time() - back_at
        time.sleep(0.5)
    after = fleet.store.read().endpoints[ENDPOINT]
    during = [a for a in load.answers if stopped_at <= a.sent <= back_at]
    failed = load.failed()
    warned = controller.said("unreachable")
    print(
        f"\nPostgreSQL down {back_at - stopped_at:.1f}s under load, rollout of version {new} at "
        f"{rollout.steps[rollout.step]}%: {len(failed)} of {len(load.answers)} requests failed ({len(during)} sent "
        f"while it was down); both gateways said 'unreachable' after {said - stopped_at:.1f}s; admin change refused "
        f"{[a.status_code for a in refused]} Retry-After {[a.headers.get('retry-after') for a in refused]}: "
        f"{refused[0].json()['error']['message'][:120]}...; the controller said so in {len(warned)} WARNING lines, "
        f"read the store again {resumed_after:.1f}s and promoted {promoted_after:.1f}s after it was back: "
        f"{after.rollout.outcome}"
    )
    assert failed == [], failed[:5]
    assert len(during) > 20, "the load ran through the outage"
    for answer in refused:
        assert answer.status_code == 503 and answer.headers["retry-after"] == "5", answer.text
        assert "nothing was changed" in answer.json()["error"]["message"]
    assert (kept.registered_name, kept.max_versions) == (before.registered_name, before.max_versions)
    assert (after.registered_name, after.max_versions) == (before.registered_name, before.max_versions)
    assert kept.rollout.status != "rolled_back"
    assert kept.rollout.step > rollout.step or kept.rollout.step_started == rollout.step_started, "where it was"
    assert after.rollout.status == "promoted" and after.weights == {new: 1.0}
    assert warned, "the controller said the store was away"

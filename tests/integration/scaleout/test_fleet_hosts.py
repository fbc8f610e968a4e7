"""Issue 24's proof on several hosts of one machine (the fleet of `conftest`: two Triton hosts, two gateway hosts,
the registry host, PostgreSQL), in order on endpoint `emb`: a new registry version deployed under load through both
gateways; a canary split over both gateway hosts; a failing version's rollout rolled back and a good one's promoted,
each judged from Prometheus' sums over both gateways; one Triton host's server killed under load and started again by
its agent (no request lost but those in flight on it); a length shift over both gateway hosts raising the fleet's drift
score. Each test prints its figures. The registry and a wedged Triton: `test_fleet_outages`."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter

from loadtest.sentences import long, short
from services.gateway.version_files import FILES
from services.lifecycle.deployments import EndpointState
from services.prometheus_api import increase_between, selector
from tests.integration.scaleout.conftest import ENDPOINT, REGISTERED, Fleet
from tests.support.agents import first_grpc_answer
from tests.support.lifecycle import broken_model
from tests.support.servers import remove_files, stub_shared_memory
from tests.support.traffic import Load

CALM, SHIFTED = short(400, seed=11), long(200, seed=12)
SWITCH = 5.0
"""Seconds within which every gateway host serves a version that went live: the gateways poll the store every
0.5 s; the rest is margin for a busy 2-core host."""


def test_a_new_version_goes_live_on_both_tritons_before_either_gateway_serves_it(fleet: Fleet, tiny_model):
    old = fleet.live()[-1]
    last_unready = 0.0  # the last moment a Triton was seen without the new version
    with Load(fleet.gateway_urls, CALM, endpoint=ENDPOINT, clients=8) as load:
        time.sleep(1.0)
        # the version served: a version unloaded meanwhile (a previous test's, placed late) takes its count with it
        calls = [fleet.triton_calls(host, old) for host in fleet.tritons]
        time.sleep(2.0)
        calls = [fleet.triton_calls(host, old) - before for host, before in zip(fleet.tritons, calls, strict=True)]
        new = fleet.publish(tiny_model)
        deadline = time.monotonic() + 90
        while fleet.state(new) != "live":
            now = time.time()
            if not all(fleet.ready_on(new)):
                last_unready = now
            assert time.monotonic() < deadline, fleet.hosts.logs()
            time.sleep(0.05)
        live_seen = time.time()
        ready_at_live, held_at_live = fleet.ready_on(new), fleet.held_by(new)
        time.sleep(SWITCH + 1.0)
    served = [a for a in load.answers if a.version == new]
    first_served = min(a.sent for a in served)
    switched = [max((a.sent for a in load.answers if a.gateway == g and a.version == old), default=0.0) for g in (0, 1)]
    shares = [round(n / sum(calls), 3) for n in calls]
    print(
        f"\nTriton calls from both gateway hosts over 2 s of load: {calls} -> shares {shares}"
        f"\nversion {new} under load: {len(load.answers)} requests, {len(load.failed())} failed; at the moment it was "
        f"seen live, ready on the Tritons {ready_at_live} and reported by {sorted(held_at_live)}; first answer sent "
        f"{first_served - last_unready:.2f}s after a Triton was last seen without it; the gateways' last answers by "
        f"version {old} sent {[round(t - live_seen, 2) for t in switched]}s after it was seen live"
    )
    assert all(0.35 <= share <= 0.65 for share in shares), shares
    assert load.failed() == []
    assert ready_at_live == [True, True] and len(held_at_live) == 2
    assert first_served > last_unready, "no gateway served it before both Tritons held it"
    assert {a.gateway for a in served} == {0, 1}
    for host in fleet.gateways:  # its files fetched from the registry into its own directory, none read elsewhere
        assert sorted(p.name for p in (host.run_dir / "versions" / ENDPOINT / new).iterdir()) == sorted(FILES)
    assert all(t - live_seen <= SWITCH for t in switched), f"both gateway hosts switched within {SWITCH} s"


def test_a_canary_split_reaches_both_gateway_hosts(fleet: Fleet, tiny_model):
    if len(fleet.live()) < 2:  # run alone: the fleet serves its first version only
        fleet.wait_state(fleet.publish(tiny_model), "live")
    old, new = fleet.live()[-2:]
    fleet.admin("PUT", f"/endpoints/{ENDPOINT}/canary", {"versions": [new, old], "weights": [0.1, 0.9]})
    for gateway in (0, 1):
        fleet.hosts.wait_for(
            f"the split on gateway {gateway}", lambda g=gateway: Counter(fleet.answered_by(g))[old] > 10, 10
        )
    # the split's arithmetic is test_routing.py's; here: the weights reach both hosts (600 draws: the 5-point bound
    # is 4.1 standard deviations of a 10% share)
    load = Load(fleet.gateway_urls, CALM, endpoint=ENDPOINT, clients=16, pause=0, requests=600).run()
    shares = [round(load.versions(g)[new] / sum(load.versions(g).values()), 3) for g in (0, 1)]
    share = load.versions()[new] / len(load.answers)
    print(f"\ncanary 10/90 over {len(load.answers)} requests: {share:.1%} on version {new} (per gateway {shares})")
    assert load.failed() == [] and len(load.answers) == 600
    assert 0.05 <= share <= 0.15, share


def test_a_failing_version_is_rolled_back_on_the_fleets_numbers(fleet: Fleet, tmp_path):
    stable = fleet.live()[-1]
    fleet.admin("PUT", f"/endpoints/{ENDPOINT}/canary", {"versions": [stable], "weights": [1.0]})  # new ones wait
    broken = fleet.publish(broken_model(tmp_path))
    fleet.wait_state(broken, "live")
    policy = {"steps": [50, 100], "dwell": 4, "max_error_rate": 0.01, "max_p99_ratio": 5, "min_requests": 10}
    with Load(fleet.gateway_urls, [*CALM[:20], *SHIFTED[:20]], endpoint=ENDPOINT, clients=4, pause=0.03) as load:
        fleet.admin("POST", f"/endpoints/{ENDPOINT}/rollout", {"version": broken, **policy})
        endpoint = fleet.hosts.wait_for("the rollback", lambda: rolled_back(fleet, broken), 40, interval=0.1)
        time.sleep(1.0)
    window = (endpoint.rollout.step_started, endpoint.versions[broken].drain_started)
    tags = {v.version: v.tags for v in fleet.registry.versions(REGISTERED)}[broken]
    numbers = json.loads(tags["rollout.numbers"])
    per_gateway = per_instance(fleet, broken, *window)
    print(
        f"\nversion {broken} rolled back after {window[1] - window[0]:.1f}s at 50%: numbers {numbers}; Prometheus, "
        f"gateway by gateway over that window: {per_gateway}; {len(load.failed())} of {len(load.answers)} requests "
        "failed meanwhile"
    )
    assert tags["rollout"] == "rejected" and endpoint.rollout.status == "rolled_back"
    assert endpoint.weights == {stable: 1.0}
    assert len(per_gateway) == 2 and min(per_gateway.values()) > 0, "both gateway hosts sent it traffic"
    assert numbers["new_requests"] > max(per_gateway.values()), "judged on both gateways' requests, summed"
    assert numbers["new_error_rate"] > 0.01


def test_a_rollout_that_passes_is_promoted(fleet: Fleet, tiny_model):
    stable = fleet.live()[-1]
    good = fleet.publish(tiny_model)
    fleet.wait_state(good, "live")
    policy = {"steps": [50, 100], "dwell": 3, "max_error_rate": 0.05, "max_p99_ratio": 5, "min_requests": 10}
    with Load(fleet.gateway_urls, CALM, endpoint=ENDPOINT, clients=4, pause=0.03) as load:
        started = time.monotonic()
        fleet.admin("POST", f"/endpoints/{ENDPOINT}/rollout", {"version": good, **policy})
        fleet.hosts.wait_for(
            "the promotion", lambda: fleet.store.read().endpoints[ENDPOINT].rollout.status == "promoted", 40
        )
        promoted_after = time.monotonic() - started
        time.sleep(0.5)
    endpoint = fleet.store.read().endpoints[ENDPOINT]
    tagged = lambda: {v.version: v.tags for v in fleet.registry.versions(REGISTERED)}[good]  # noqa: E731
    fleet.hosts.wait_for("the promotion's registry tag", lambda: "rollout" in tagged(), 20)  # after the state's
    tags = tagged()
    print(
        f"\nversion {good} promoted over {stable} {promoted_after:.1f}s after its rollout began: "
        f"{endpoint.rollout.outcome}; "
        f"{len(load.failed())} of {len(load.answers)} requests failed; answers by version {load.versions()}"
    )
    assert tags["rollout"] == "promoted"
    assert str(fleet.registry.client.get_model_version_by_alias(REGISTERED, "champion").version) == good
    assert load.failed() == []
    assert Counter(fleet.answered_by(0) + fleet.answered_by(1)) == {good: 40}
    live = fleet.live()
    gone = [v for v in endpoint.versions if v not in live]
    fleet.hosts.wait_for(
        "every Triton host holding the live versions only",
        lambda: all(fleet.placed_on(h) == live for h in fleet.tritons),
    )
    assert not any(any(fleet.ready_on(version)) for version in gone), f"versions {gone} left both Tritons"


def rolled_back(fleet: Fleet, version: str) -> EndpointState | None:
    """The endpoint's state once `version` is rejected, while it still says when (its drain's start, cleared once the
    controller has unloaded it)."""
    endpoint = fleet.store.read().endpoints[ENDPOINT]
    record = endpoint.versions[version]
    return endpoint if record.state == "rejected" and record.drain_started is not None else None


def per_instance(fleet: Fleet, version: str, since: float, at: float) -> dict[str, float]:
    """Requests of `version` each gateway host answered between two instants, as Prometheus holds them."""
    series = selector("serving_endpoint_requests_total", endpoint=ENDPOINT, version=version)
    found = fleet.prometheus.query(f"sum by (instance) ({increase_between(series, at - since)})", at)
    return {labels["instance"]: value for labels, value in found}


def test_a_triton_host_killed_under_load_loses_at_most_one_percent_and_rejoins_holding_every_live_version(
    fleet: Fleet,
):
    victim, survivor = fleet.tritons
    live, replica = fleet.live(), f"{victim.address}:{fleet.ports.grpc}"
    regions = stub_shared_memory(victim.run_dir)
    agent_log = victim.log("triton-agent")
    said_before = agent_log.read_text(errors="replace").count("triton killed by SIGKILL; restarting")
    with Load(fleet.gateway_urls, CALM, endpoint=ENDPOINT, clients=8) as load:
        time.sleep(1.0)
        survivor_before = fleet.triton_calls(survivor, live[-1])  # the version served
        killed = victim.pid("triton")
        killed_at = time.time()
        os.kill(killed, signal.SIGKILL)
        time.sleep(2.0)
        moved = fleet.triton_calls(survivor, live[-1]) - survivor_before
        holds_all = first_grpc_answer(victim.address, fleet.ports, ENDPOINT, live, 90)
        back_at = time.time()
        fleet.hosts.wait_for("the restarted Triton's first calls", lambda: fleet.triton_calls(victim) > 0, 15, 0.1)
        traffic_after = time.time() - back_at
        fleet.hosts.wait_for("its replica reported again", lambda: replica in fleet.held_by(live[-1]), 30)
        reported_after = time.time() - killed_at
        time.sleep(1.0)
    remove_files(regions)
    failed = load.failed()
    on_it = [a for a in failed if a.sent <= killed_at <= a.received]
    print(
        f"\nTriton on {victim.address} killed (-9) under load: {len(failed)} of {len(load.answers)} requests failed "
        f"({Counter(a.code for a in failed)}, {len(on_it)} of them in flight at the kill); the other answered "
        f"{moved:.0f} calls in the 2 s after; restarted by its agent, its gRPC port answered "
        f"{back_at - killed_at:.1f}s after the kill holding every live version {live}: {holds_all}; its first call "
        f"{traffic_after:.2f}s later; reported by its agent again {reported_after:.1f}s after the kill"
    )
    assert victim.pid("triton") != killed
    assert agent_log.read_text(errors="replace").count("triton killed by SIGKILL; restarting") == said_before + 1
    assert holds_all, "its first answer already held every live version"
    assert moved > 0, "traffic moved to the other replica"
    assert failed == on_it, "no request sent after the kill failed"
    assert len(failed) <= 0.01 * len(load.answers), failed[:5]


def drift_score(fleet: Fleet, version: str, job: str = "controller") -> float | None:
    labels = {"job": job, "endpoint": ENDPOINT, "version": version, "feature": "token_length", "method": "psi"}
    found = fleet.prometheus.query(selector("serving_drift_score", **labels), time.time())
    return found[0][1] if found else None


def test_a_length_shift_over_both_gateway_hosts_raises_the_fleets_drift_score_and_alert(fleet: Fleet):
    """The version's reference is the fleet's first 200 values (CONTROLLER_DRIFT__REFERENCE_SIZE, what one worker
    needed): short texts, as every request it answered so far. 200 long ones over both hosts raise the score."""
    version = fleet.live()[-1]
    fleet.hosts.wait_for("a calm score", lambda: drift_score(fleet, version) is not None, 20)
    calm = drift_score(fleet, version)
    assert calm < 0.25, calm
    started = time.monotonic()
    sent = Load(fleet.gateway_urls, SHIFTED, endpoint=ENDPOINT, clients=4, pause=0.02, requests=len(SHIFTED)).run()
    sent_after = time.monotonic() - started
    fleet.hosts.wait_for("the drift score over 0.25", lambda: (drift_score(fleet, version) or 0) > 0.25, 20)
    raised_after = time.monotonic() - started
    firing = selector("ALERTS", alertname="ModelInputDrift", alertstate="firing", endpoint=ENDPOINT, version=version)
    fleet.hosts.wait_for("the drift alert firing", lambda: fleet.prometheus.query(firing, time.time()), 20)
    shifted = drift_score(fleet, version)
    print(
        f"\nfleet drift of version {version}: PSI {calm:.3f} calm, {shifted:.3f} after {len(sent.answers)} long texts "
        f"over both gateway hosts ({[sent.versions(g)[version] for g in (0, 1)]} each, sent in {sent_after:.1f}s): "
        f"over 0.25 {raised_after:.1f}s after the first; alert firing {time.monotonic() - started:.1f}s after it"
    )
    assert sent.failed() == [] and min(sent.versions(g)[version] for g in (0, 1)) > 0
    assert shifted > 0.25
    assert drift_score(fleet, version, job="serving") is None, "the gateways' workers judge nothing themselves"

"""Links of `conftest`'s fleet cut with real packet drops (`tests.support.partition`: nftables, every packet of the link
dropped both ways, nothing refused or reset) under load, then healed:

- both gateway hosts cut off from one Triton host's gRPC port: every gateway worker takes it out of rotation and
  serves from the other replica, no request fails, and it gets calls again within 15 s of the link healing;
- the controller cut off from Prometheus while a rollout step is judged: the rollout pauses where it is (neither
  promoted nor rolled back on numbers it cannot read), says so in one log line and `serving_rollouts_paused`, and
  carries on once the link heals;
- the state store (PostgreSQL) cut off from every process: no request fails, both gateways say `unreachable`, an
  admin change is refused with a 503 and not made, and gateways and controller use the store again within 15 s;
- the registry (MLflow) cut off from every process: no request fails, the controller and both agents say so once,
  `serving_registry_up` goes to 0, and all say it answers again within 15 s of healing.

On loopback a link is its server's address and port (`tests.support.partition`). Each test prints its figures."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from loadtest.sentences import short
from tests.integration.scaleout.conftest import ENDPOINT, REGISTRY, TOKEN, Fleet
from tests.integration.scaleout.test_fleet_outages import LogSince, settled
from tests.integration.scaleout.test_fleet_store_restart import store_ready
from tests.support.partition import Partition, available
from tests.support.postgres import HOST as STORE_HOST
from tests.support.traffic import Load

pytestmark = pytest.mark.skipif(available() is not None, reason=available() or "")
CALM = short(400, seed=41)
CUT = 8.0
"""Seconds a link stays cut once the cut was noticed."""
CONVERGE = 15.0
"""Seconds within which the fleet is whole again once a link heals (the issue's bar)."""


def gateway_sum(fleet: Fleet, metric: str, replica: str, gateways=(0, 1)) -> float:
    """A gateway metric's samples for one Triton replica, summed over the gateway hosts (each over its workers)."""
    pattern = rf'^{metric}\{{[^}}]*replica="{re.escape(replica)}"[^}}]*\}} (\S+)$'
    total = 0.0
    for gateway in gateways:
        text = httpx.get(f"{fleet.gateway_urls[gateway]}/metrics", timeout=10).text
        total += sum(float(value) for value in re.findall(pattern, text, re.M))
    return total


def ejected(fleet: Fleet, gateway: int, replica: str) -> float:
    """The gateway host's workers that have `replica` out of rotation now (for any reason)."""
    return gateway_sum(fleet, "serving_triton_replica_ejected", replica, (gateway,))


def out_of_rotation(fleet: Fleet, replica: str) -> list[str]:
    """Each gateway host's `serving_triton_replica_ejected` samples for `replica` that are not 0 (why it is out)."""
    found = []
    for gateway, url in enumerate(fleet.gateway_urls):
        text = httpx.get(f"{url}/metrics", timeout=10).text
        found += [
            f"gateway {gateway}: {line}"
            for line in re.findall(r"^serving_triton_replica_ejected\{.*$", text, re.M)
            if replica in line and not line.endswith(" 0.0")
        ]
    return found


def sequences(fleet: Fleet, replica: str) -> float:
    """Sequences the replica answered for both gateway hosts' callers (its agent's probes are not among them)."""
    return gateway_sum(fleet, "serving_triton_sequences_total", replica)


def test_a_triton_cut_off_from_both_gateways_is_left_out_and_back_within_15_s_of_healing(fleet: Fleet):
    settled(fleet)
    victim, survivor = fleet.tritons[1], fleet.tritons[0]
    replica = f"{victim.address}:{fleet.ports.grpc}"
    with Load(fleet.gateway_urls, CALM, endpoint=ENDPOINT, clients=8) as load:
        time.sleep(1.0)
        with Partition() as cut:
            cut.link(victim.address, fleet.ports.grpc)
            cut_at = time.time()
            fleet.hosts.wait_for(
                "both gateway hosts leaving the replica out",
                lambda: all(ejected(fleet, g, replica) >= 1 for g in (0, 1)),
                20,
                interval=0.5,
            )
            left_after = time.time() - cut_at
            time.sleep(CUT)
            replicas = [replica, f"{survivor.address}:{fleet.ports.grpc}"]
            counts = [sequences(fleet, r) for r in replicas]
            time.sleep(2.0)
            during = [sequences(fleet, r) - n for r, n in zip(replicas, counts, strict=True)]
        healed_at = time.time()
        before = sequences(fleet, replica)
        fleet.hosts.wait_for(
            "the replica answering calls again", lambda: sequences(fleet, replica) > before + 5, 60, interval=0.2
        )
        back_after = time.time() - healed_at
        try:
            fleet.hosts.wait_for(
                "no gateway leaving it out", lambda: all(ejected(fleet, g, replica) == 0 for g in (0, 1)), 60
            )
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\nstill out, by gateway host and why: {out_of_rotation(fleet, replica)}"
            ) from None
        whole_after = time.time() - healed_at
        time.sleep(1.0)
    failed = load.failed()
    print(
        f"\ngRPC link to the Triton on {victim.address} cut for {healed_at - cut_at:.1f}s under load: {len(failed)} of "
        f"{len(load.answers)} requests failed; both gateway hosts left it out after {left_after:.1f}s; over 2 s of "
        f"the cut it answered {during[0]:.0f} sequences, the other {during[1]:.0f}; after healing it answered "
        f"sequences again after {back_after:.1f}s, no gateway worker left it out after {whole_after:.1f}s"
    )
    assert failed == [], failed[:5]
    assert during[0] == 0 and during[1] > 0
    assert back_after <= CONVERGE and whole_after <= CONVERGE


def test_a_rollout_cut_off_from_prometheus_pauses_says_so_once_and_carries_on_once_healed(fleet: Fleet, tiny_model):
    live = settled(fleet)
    if len(live) < 2:  # run alone: the fleet serves its first version only
        fleet.wait_state(fleet.publish(tiny_model), "live")
    stable, version = fleet.live()[-1], fleet.live()[-2]  # the older one rolled out again over the newer
    fleet.admin("PUT", f"/endpoints/{ENDPOINT}/canary", {"versions": [stable], "weights": [1.0]})
    controller = LogSince(fleet.registry_host.log("controller"))
    policy = {"steps": [50, 100], "dwell": 3, "max_error_rate": 0.05, "max_p99_ratio": 5, "min_requests": 10}
    with Load(fleet.gateway_urls, CALM, endpoint=ENDPOINT, clients=4, pause=0.03) as load:
        time.sleep(1.0)
        fleet.admin("POST", f"/endpoints/{ENDPOINT}/rollout", {"version": version, **policy})
        rollout = fleet.rollout_under_way()
        with Partition() as cut:
            cut.link(REGISTRY, fleet.prometheus_port)
            cut_at = time.time()
            fleet.hosts.wait_for(
                "serving_rollouts_paused 1", lambda: fleet.controller_metric("serving_rollouts_paused") == 1, 30
            )
            paused_after = time.time() - cut_at
            time.sleep(CUT)
            held = fleet.store.read().endpoints[ENDPOINT]
        healed_at = time.time()
        fleet.hosts.wait_for(
            "the promotion", lambda: fleet.store.read().endpoints[ENDPOINT].rollout.status == "promoted", 40
        )
        promoted_after = time.time() - healed_at
        unpaused = fleet.controller_metric("serving_rollouts_paused")
        time.sleep(0.5)
    said = controller.said("paused at 50%")
    resumed = [line for line in controller.lines() if "resumes at 50%" in line]
    print(
        f"\ncontroller cut off from Prometheus for {healed_at - cut_at:.1f}s while version {version}'s rollout step "
        f"was judged: paused (metric) after {paused_after:.1f}s, still {held.rollout.status} at step "
        f"{held.rollout.step} {healed_at - rollout.step_started:.1f}s into a {policy['dwell']}s dwell; promoted "
        f"{promoted_after:.1f}s after healing; {len(load.failed())} of {len(load.answers)} requests failed; "
        f"said:\n" + "\n".join(line[-240:] for line in said + resumed)
    )
    assert (held.rollout.status, held.rollout.step, held.rollout.step_started) == (
        "running",
        rollout.step,
        rollout.step_started,
    ), "neither promoted nor rolled back while its numbers could not be read"
    assert len(said) == 1, "said once, not once per tick"
    assert len(resumed) == 1 and unpaused == 0
    assert promoted_after <= CONVERGE
    assert load.failed() == []


def store_back(controller: LogSince) -> bool:
    """Whether the controller said it uses the store again: its state read, or each step that failed on the store
    since (each says "works again")."""
    lines = controller.lines()
    if any("readable again" in line for line in lines):
        return True
    failed = {m.group(1) for line in lines if (m := re.search(r"(\S+) failed \(the deployment state store", line))}
    working = {m.group(1) for line in lines if (m := re.search(r"(\S+) works again", line))}
    return bool(failed) and failed <= working


def test_the_state_store_cut_off_under_load_keeps_the_last_state_refuses_changes_and_converges(fleet: Fleet, postgres):
    settled(fleet)
    controller = LogSince(fleet.registry_host.log("controller"))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    change = {"name": "another-model", "max_versions": 3}
    before = fleet.store.read().endpoints[ENDPOINT]
    with Load(fleet.gateway_urls, CALM, endpoint=ENDPOINT, clients=8) as load:
        time.sleep(1.0)
        with Partition() as cut:
            cut.link(STORE_HOST, postgres.port)
            cut_at = time.time()
            said = fleet.hosts.wait_for(
                "both gateways saying the store is unreachable",
                lambda: all(store_ready(fleet, g).startswith("unreachable") for g in (0, 1)) and time.time(),
                30,
            )
            asked = time.time()
            refused = httpx.put(
                f"{fleet.gateway_urls[0]}/admin/endpoints/{ENDPOINT}/auto-update",
                json=change,
                headers=headers,
                timeout=60,
            )
            refused_after = time.time() - asked
            time.sleep(max(0.0, cut_at + CUT - time.time()))
        healed_at = time.time()
        fleet.hosts.wait_for(
            "both gateways reading the store again", lambda: all(store_ready(fleet, g) == "ok" for g in (0, 1)), 60
        )
        ok_after = time.time() - healed_at
        fleet.hosts.wait_for("the controller using the store again", lambda: store_back(controller), 60)
        controller_after = time.time() - healed_at
        time.sleep(1.0)
    after = fleet.store.read().endpoints[ENDPOINT]
    print(
        f"\nstate store cut off for {healed_at - cut_at:.1f}s under load: {len(load.failed())} of {len(load.answers)} "
        f"requests failed; both gateways said 'unreachable' after {said - cut_at:.1f}s; an admin change answered "
        f"{refused.status_code} after {refused_after:.1f}s; after healing the gateways said 'ok' after "
        f"{ok_after:.1f}s, the controller read it after {controller_after:.1f}s"
    )
    assert load.failed() == [], load.failed()[:5]
    assert refused.status_code == 503 and refused.headers["retry-after"] == "5", refused.text
    assert (after.registered_name, after.max_versions) == (before.registered_name, before.max_versions)
    assert ok_after <= CONVERGE and controller_after <= CONVERGE


def test_the_registry_cut_off_under_load_is_said_once_by_each_side_and_back_within_15_s_of_healing(fleet: Fleet):
    settled(fleet)
    marks = {host.name: LogSince(host.log("triton-agent")) for host in fleet.tritons}
    marks["controller"] = LogSince(fleet.registry_host.log("controller"))
    with Load(fleet.gateway_urls, CALM, endpoint=ENDPOINT, clients=8) as load:
        time.sleep(1.0)
        with Partition() as cut:
            cut.link(REGISTRY, fleet.mlflow_port)
            cut_at = time.time()
            said = fleet.hosts.wait_for(
                "the controller and both agents saying the registry is away",
                lambda: all(mark.said("registry") for mark in marks.values()) and time.time(),
                45,
            )
            fleet.hosts.wait_for(
                "serving_registry_up 0", lambda: fleet.controller_metric("serving_registry_up") == 0, 30
            )
            time.sleep(max(0.0, cut_at + CUT - time.time()))
        healed_at = time.time()
        fleet.hosts.wait_for("serving_registry_up 1", lambda: fleet.controller_metric("serving_registry_up") == 1, 60)
        up_after = time.time() - healed_at
        fleet.hosts.wait_for(
            "both agents saying the registry answers again",
            lambda: all(any("answers again" in line for line in marks[h.name].lines()) for h in fleet.tritons),
            60,
        )
        agents_after = time.time() - healed_at
        time.sleep(1.0)
    warned = {name: mark.said("registry") for name, mark in marks.items()}
    print(
        f"\nregistry cut off for {healed_at - cut_at:.1f}s under load: {len(load.failed())} of {len(load.answers)} "
        f"requests failed; the controller and both agents said so within {said - cut_at:.1f}s "
        f"({ {name: len(lines) for name, lines in warned.items()} } WARNING lines); after healing "
        f"serving_registry_up was 1 after {up_after:.1f}s, both agents said it answers after {agents_after:.1f}s"
    )
    assert load.failed() == [], load.failed()[:5]
    for name, lines in warned.items():
        assert 1 <= len(lines) <= 2, f"{name} said it once per outage, not once per tick: {lines}"
    assert up_after <= CONVERGE and agents_after <= CONVERGE

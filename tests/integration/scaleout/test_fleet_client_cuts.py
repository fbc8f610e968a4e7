"""One client of `conftest`'s fleet cut off from a server that every other process still reaches
(`tests.support.partition`: `Partition.client`, the client's packets dropped, nothing refused or reset), under load,
then healed:

- one gateway host cut off from the state store while the other changes the traffic through it: the cut one serves
  its last state and says `unreachable`, the other serves the change at once, and the cut one follows it within 15 s
  of healing;
- the controller alone cut off from the state store in the middle of a rollout: the gateways keep reading it and
  serving, the rollout waits where it is, and it is promoted once the link heals;
- one Triton host's agent alone cut off from the registry while a version is registered: only that agent says so,
  the other loads the version, which goes live (on every replica) once the link heals.

Each test prints its figures."""

from __future__ import annotations

import time
from collections import Counter

import httpx
import pytest

from tests.integration.scaleout.conftest import ENDPOINT, REGISTRY, Fleet
from tests.integration.scaleout.test_fleet_outages import LogSince, settled
from tests.integration.scaleout.test_fleet_partitions import CALM, CONVERGE, CUT, store_back
from tests.integration.scaleout.test_fleet_store_restart import store_ready
from tests.support.partition import Partition, available, cgroup2_mount
from tests.support.postgres import HOST as STORE_HOST
from tests.support.traffic import Load

pytestmark = pytest.mark.skipif(
    available() is not None or cgroup2_mount() is None,
    reason=available() or "no writable cgroup v2 hierarchy under /sys/fs/cgroup to cut one client off by",
)


@pytest.fixture(autouse=True)
def newest_served(fleet: Fleet):
    """Each test here pins a version or promotes one; the fleet's other tests expect the newest live one served."""
    yield
    fleet.admin("PUT", f"/endpoints/{ENDPOINT}/canary", {"newest": 1, "weights": [1.0]})


def two_live(fleet: Fleet, tiny_model) -> list[str]:
    """The fleet's live versions once settled, a second one published first where it serves one only (run alone)."""
    if len(settled(fleet)) < 2:
        fleet.wait_state(fleet.publish(tiny_model), "live")
    return fleet.live()


def pin(fleet: Fleet, version: str, gateway: int = 0) -> None:
    """Every request of the endpoint to `version`, written to the store through `gateway`."""
    fleet.admin("PUT", f"/endpoints/{ENDPOINT}/canary", {"versions": [version], "weights": [1.0]}, gateway=gateway)


def answering(fleet: Fleet, gateway: int) -> str | None:
    """The version that answers one request to `gateway` now."""
    answer = httpx.post(f"{fleet.gateway_urls[gateway]}/serve/{ENDPOINT}", json={"text": "a probe"}, timeout=30)
    return answer.headers.get("x-model-version")


def test_one_gateway_host_cut_off_from_the_store_serves_its_last_state_and_follows_the_other_once_healed(
    fleet: Fleet, tiny_model, postgres
):
    first, then = two_live(fleet, tiny_model)[-1], fleet.live()[-2]
    pin(fleet, first)
    fleet.hosts.wait_for(
        f"both gateways answering with {first}", lambda: {answering(fleet, g) for g in (0, 1)} == {first}, 30
    )
    with Load(fleet.gateway_urls, CALM, endpoint=ENDPOINT, clients=8) as load:
        time.sleep(1.0)
        with Partition() as cut:
            cut.client(fleet.gateways[1].pid("gateway"), STORE_HOST, postgres.port)
            cut_at = time.time()
            fleet.hosts.wait_for(
                "gateway 1 saying the store is unreachable", lambda: store_ready(fleet, 1).startswith("unreachable"), 30
            )
            said_after, other_said = time.time() - cut_at, store_ready(fleet, 0)
            pin(fleet, then, gateway=0)
            changed_at = time.time()
            fleet.hosts.wait_for(f"gateway 0 answering with {then}", lambda: answering(fleet, 0) == then, 15)
            followed_after = time.time() - changed_at
            time.sleep(max(3.0, cut_at + CUT - time.time()))
            kept = Counter(a.version for a in load.answers if a.gateway == 1 and changed_at + 1.0 <= a.sent)
        healed_at = time.time()
        fleet.hosts.wait_for("gateway 1 reading the store again", lambda: store_ready(fleet, 1) == "ok", 60)
        ok_after = time.time() - healed_at
        fleet.hosts.wait_for(f"gateway 1 answering with {then}", lambda: answering(fleet, 1) == then, 60)
        converged_after = time.time() - healed_at
        time.sleep(1.0)
    failed = load.failed()
    print(
        f"\ngateway host 1 alone cut off from the state store for {healed_at - cut_at:.1f}s under load: {len(failed)} "
        f"of {len(load.answers)} requests failed; it said 'unreachable' after {said_after:.1f}s while gateway 0 said "
        f"{other_said!r}; traffic moved from version {first} to {then} through gateway 0, which served it after "
        f"{followed_after:.1f}s while gateway 1 kept serving {dict(kept)}; after healing gateway 1 said 'ok' after "
        f"{ok_after:.1f}s and served {then} after {converged_after:.1f}s"
    )
    assert failed == [], failed[:5]
    assert other_said == "ok"
    assert set(kept) == {first}, "the cut gateway serves the last state it read"
    assert ok_after <= CONVERGE and converged_after <= CONVERGE


def test_the_controller_alone_cut_off_from_the_store_mid_rollout_holds_it_and_promotes_it_once_healed(
    fleet: Fleet, tiny_model, postgres
):
    stable, version = two_live(fleet, tiny_model)[-1], fleet.live()[-2]
    pin(fleet, stable)
    controller_pid = fleet.registry_host.pid("controller")
    controller = LogSince(fleet.registry_host.log("controller"))
    policy = {"steps": [50, 100], "dwell": 5, "max_error_rate": 0.05, "max_p99_ratio": 5, "min_requests": 10}
    with Load(fleet.gateway_urls, CALM, endpoint=ENDPOINT, clients=4, pause=0.03) as load:
        time.sleep(1.0)
        fleet.admin("POST", f"/endpoints/{ENDPOINT}/rollout", {"version": version, **policy})
        fleet.rollout_under_way()
        with Partition() as cut:
            cut.client(controller_pid, STORE_HOST, postgres.port)
            cut_at = time.time()
            at_cut = fleet.store.read().endpoints[ENDPOINT].rollout  # the last the controller could write
            fleet.hosts.wait_for(
                "the controller saying it cannot reach the store",
                lambda: controller.said("keeping the last good state"),
                30,
            )
            said_after = time.time() - cut_at
            gateways = [store_ready(fleet, g) for g in (0, 1)]
            time.sleep(max(0.0, cut_at + CUT - time.time()))
            held = fleet.store.read().endpoints[ENDPOINT].rollout
        healed_at = time.time()
        fleet.hosts.wait_for("the controller using the store again", lambda: store_back(controller), 60)
        back_after = time.time() - healed_at
        fleet.hosts.wait_for(
            "the promotion", lambda: fleet.store.read().endpoints[ENDPOINT].rollout.status == "promoted", 60
        )
        promoted_after = time.time() - healed_at
        time.sleep(0.5)
    failed = load.failed()
    print(
        f"\nthe controller alone cut off from the state store for {healed_at - cut_at:.1f}s during version {version}'s "
        f"rollout over {stable} (dwell {policy['dwell']}s): said so after {said_after:.1f}s; the gateways said "
        f"{gateways}; the rollout stayed {held.status} at step {held.step}; after healing the controller used the "
        f"store after {back_after:.1f}s and promoted it after {promoted_after:.1f}s; {len(failed)} of "
        f"{len(load.answers)} requests failed"
    )
    assert failed == [], failed[:5]
    assert gateways == ["ok", "ok"], "the other clients of the store reach it"
    assert at_cut.status == "running" and (held.status, held.step) == (at_cut.status, at_cut.step)
    assert fleet.registry_host.pid("controller") == controller_pid, "the controller rode it out, not restarted"
    assert back_after <= CONVERGE and promoted_after <= CONVERGE + 2 * policy["dwell"]


def test_one_agent_cut_off_from_the_registry_holds_a_new_version_back_until_healed_and_only_it_says_so(
    fleet: Fleet, tiny_model
):
    settled(fleet)
    cut_host, other = fleet.tritons[1], fleet.tritons[0]
    marks = {host.name: LogSince(host.log("triton-agent")) for host in fleet.tritons}
    controller = LogSince(fleet.registry_host.log("controller"))
    with Load(fleet.gateway_urls, CALM, endpoint=ENDPOINT, clients=8) as load:
        time.sleep(1.0)
        with Partition() as cut:
            cut.client(cut_host.pid("triton-agent"), REGISTRY, fleet.mlflow_port)
            cut_at = time.time()
            fleet.hosts.wait_for(
                "the cut agent saying the registry is away", lambda: marks[cut_host.name].said("registry"), 45
            )
            said_after = time.time() - cut_at
            version = fleet.publish(tiny_model)
            other_replica = f"{other.address}:{fleet.ports.grpc}"
            fleet.hosts.wait_for(
                f"the other agent holding version {version}", lambda: other_replica in fleet.held_by(version), 90
            )
            time.sleep(max(0.0, cut_at + CUT - time.time()))
            during = fleet.state(version)
        healed_at = time.time()
        fleet.wait_state(version, "live", 90)
        live_after = time.time() - healed_at
        time.sleep(1.0)
    failed = load.failed()
    others = {"other agent": marks[other.name].said("registry"), "controller": controller.said("registry")}
    print(
        f"\nthe agent of {cut_host.address} alone cut off from the registry for {healed_at - cut_at:.1f}s under load: "
        f"it said so after {said_after:.1f}s; version {version}, registered meanwhile, was held by the other agent "
        f"and {during!r} until the link healed, live {live_after:.1f}s after; {len(failed)} of {len(load.answers)} "
        f"requests failed; the others said of the registry: {others}"
    )
    assert failed == [], failed[:5]
    assert during != "live", "live only once every replica holds it"
    assert others == {"other agent": [], "controller": []}
    assert live_after <= CONVERGE

"""Parts of the fleet of `conftest` going away under load: the registry (MLflow's tracking server killed, then started
again on its store), and a Triton host's own server wedged (SIGSTOP: its ports accept, nothing answers). What is live
keeps serving; every process that notices says so once; each comes back by itself, nothing restarted by hand. A Triton
host's server killed under load: `test_fleet_hosts`. Each test prints its figures."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from pathlib import Path

import httpx

from loadtest.sentences import short
from services.prometheus_api import selector
from tests.integration.scaleout.conftest import ENDPOINT, Fleet
from tests.support.agents import first_grpc_answer
from tests.support.servers import remove_files, stub_shared_memory
from tests.support.traffic import Answer, Load

CALM = short(400, seed=21)
RECOVERY = 90.0
"""Seconds allowed from the registry's return to a version registered before it went away being live on both Triton
hosts. Quiet, it takes 10-15 s; on a 2-core CI runner that also restarts two Triton servers, 30 s was seen."""


class LogSince:
    """The lines a log file gained since this was made."""

    def __init__(self, path: Path):
        self.path, self.start = path, path.stat().st_size if path.exists() else 0

    def lines(self) -> list[str]:
        with open(self.path, "rb") as handle:
            handle.seek(self.start)
            return handle.read().decode(errors="replace").splitlines()

    def said(self, pattern: str) -> list[str]:
        """The new WARNING and ERROR lines that match `pattern`."""
        return [line for line in self.lines() if re.search(r" (WARNING|ERROR) ", line) and re.search(pattern, line)]


def in_flight(answers: list[Answer], at: float) -> list[Answer]:
    return [a for a in answers if a.sent <= at <= a.received]


def settled(fleet: Fleet) -> list[str]:
    """The live versions, once no version is on its way in (the live set stays what it is)."""
    fleet.hosts.wait_for(
        "no version deploying",
        lambda: all(v.state != "loading" for v in fleet.store.read().endpoints[ENDPOINT].versions.values()),
        90,
    )
    return fleet.live()


def answers(fleet: Fleet) -> bool:
    try:
        return httpx.get(f"{fleet.tracking_uri}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_registry_going_away_fails_no_request_is_said_once_and_its_return_deploys_what_waited(
    fleet: Fleet, tiny_model
):
    live, victim = settled(fleet), fleet.tritons[1]
    replica = f"{victim.address}:{fleet.ports.grpc}"
    marks = {host.name: LogSince(host.log("triton-agent")) for host in fleet.tritons}
    marks["controller"] = LogSince(fleet.registry_host.log("controller"))
    pids = [fleet.registry_host.pid("controller"), *(h.pid("triton-agent") for h in fleet.tritons)]
    regions = stub_shared_memory(victim.run_dir)
    with Load(fleet.gateway_urls, CALM, endpoint=ENDPOINT, clients=8) as load:
        time.sleep(1.0)
        new = fleet.publish(tiny_model)
        fleet.registry_host.kill("mlflow")  # at once: the controller has not fetched the new version yet
        away_at = time.time()
        fleet.hosts.wait_for(
            "the controller and both agents saying the registry is away",
            lambda: all(mark.said("registry") for mark in marks.values()),
            15,
        )
        said_after = time.time() - away_at
        fleet.hosts.wait_for("serving_registry_up 0", lambda: fleet.controller_metric("serving_registry_up") == 0, 10)
        alert = selector("ALERTS", alertname="RegistryUnreachable", alertstate="pending")
        fleet.hosts.wait_for("the registry's alert pending", lambda: fleet.prometheus.query(alert, time.time()), 10)
        killed, killed_at = victim.pid("triton"), time.time()
        os.kill(killed, signal.SIGKILL)  # its Triton restarts while the registry is away, from what it has on disk
        restarting = LogSince(victim.log("triton-agent"))
        fleet.hosts.wait_for("its restart placed", lambda: "starting Triton with" in "".join(restarting.lines()), 15)
        waited = fleet.state(new)
        fleet.start_registry(wait=False)  # MLflow takes 6 s or more to start: the same time as Triton, meanwhile
        holds_all = first_grpc_answer(victim.address, fleet.ports, ENDPOINT, live, 60)
        fleet.hosts.wait_for("the restarted replica reported again", lambda: replica in fleet.held_by(live[-1]), 30)
        back_at = fleet.hosts.wait_for("the registry answering again", lambda: answers(fleet) and time.time(), 120)
        fleet.wait_state(new, "live", RECOVERY)
        live_after = time.time() - back_at
        up_again = fleet.controller_metric("serving_registry_up")
        time.sleep(1.0)
    remove_files(regions)
    failed = load.failed()
    said = {name: mark.said("registry") for name, mark in marks.items()}
    print(
        f"\nregistry killed under load for {back_at - away_at:.1f}s: {len(failed)} of {len(load.answers)} requests "
        f"failed ({len(in_flight(failed, killed_at))} of them in flight on the Triton killed meanwhile); said by the "
        f"controller and both agents within {said_after:.1f}s, lines at WARNING/ERROR naming the registry: "
        f"{ {name: len(lines) for name, lines in said.items()} }; the Triton restarted meanwhile held {live}: "
        f"{holds_all}; version {new}, registered as it went, was {waited} while it was away and live {live_after:.1f}s "
        f"after it was back"
    )
    for name, lines in said.items():
        assert 1 <= len(lines) <= 2, f"{name} said it once per outage, not once per tick: {lines}"
    assert failed == in_flight(failed, killed_at), "no request failed but those on the killed Triton"
    assert victim.pid("triton") != killed and holds_all, "restarted from what it held on disk"
    assert waited != "live" and fleet.ready_on(new) == [True, True]
    assert up_again == 1
    assert pids == [fleet.registry_host.pid("controller"), *(h.pid("triton-agent") for h in fleet.tritons)]


def test_a_wedged_triton_is_left_out_restarted_by_its_agent_and_back_holding_every_live_version(fleet: Fleet):
    live, victim = settled(fleet), fleet.tritons[0]
    replica = f"{victim.address}:{fleet.ports.grpc}"
    agent_log = LogSince(victim.log("triton-agent"))
    wedged = victim.pid("triton")
    regions = stub_shared_memory(victim.run_dir)
    try:
        with Load(fleet.gateway_urls, CALM, endpoint=ENDPOINT, clients=8) as load:
            time.sleep(1.0)
            os.kill(wedged, signal.SIGSTOP)
            wedged_at = time.time()
            fleet.hosts.wait_for(
                "its agent no longer reporting it", lambda: replica not in fleet.store.replicas(time.time(), 2.0), 15
            )
            left_after = time.time() - wedged_at
            fleet.hosts.wait_for("the wedged Triton restarted", lambda: victim.pid("triton") != wedged, 40)
            restarted_after = time.time() - wedged_at
            holds_all = first_grpc_answer(victim.address, fleet.ports, ENDPOINT, live, 60)
            fleet.hosts.wait_for("its replica reported again", lambda: replica in fleet.held_by(live[-1]), 30)
            back_after = time.time() - wedged_at
            time.sleep(1.0)
    finally:  # nothing left stopped, whatever happened
        with contextlib.suppress(ProcessLookupError):
            os.kill(wedged, signal.SIGCONT)
        remove_files(regions)
    failed = load.failed()
    said = agent_log.said("")
    print(
        f"\nTriton on {victim.address} stopped (SIGSTOP) under load: {len(failed)} of {len(load.answers)} requests "
        f"failed; its agent stopped reporting it after {left_after:.1f}s, its supervisor restarted it after "
        f"{restarted_after:.1f}s, holding every live version {live}: {holds_all}; reported again after "
        f"{back_after:.1f}s; the agent said:\n" + "\n".join(line[-200:] for line in said)
    )
    assert failed == [], failed[:5]
    assert holds_all
    assert len([line for line in said if "does not answer" in line]) == 1, "said once, not once per tick"
    assert any("wedged" in line for line in said), "restarted on its liveness probe"

"""The gateways of `conftest`'s fleet upgraded under load. `serving reload` (the real command, as an operator runs it
on that host) replaces a host's two workers one at a time; no request fails, every answer comes from a worker that
had its endpoints loaded (the endpoint's live version, never a 404 or 503 of a worker still starting), and the command
returns once every worker is new. Both gateway hosts restarted one at a time (stopped with SIGTERM, started again)
behind clients that send a request a host refused to the other host, as a load balancer does: no request fails.
Each test prints its figures."""

from __future__ import annotations

import itertools
import os
import subprocess
import threading
import time

import httpx

from loadtest.sentences import short
from services.launcher.reload import accepting, workers
from tests.integration.scaleout.conftest import ENDPOINT, TOKEN, TRITONS, WORKERS_PER_GATEWAY, Fleet
from tests.integration.scaleout.test_fleet_outages import settled
from tests.support.agents import BIN
from tests.support.hosts import gateway_spec
from tests.support.traffic import Load

CALM = short(400, seed=51)


def test_serving_reload_replaces_a_gateway_hosts_workers_one_at_a_time_failing_no_request(fleet: Fleet):
    live = set(settled(fleet))
    host = fleet.gateways[0]
    master = host.pid("gateway")
    old = workers(master)
    env = {**os.environ, "SERVING_RUN_DIR": str(host.run_dir)}
    with Load(fleet.gateway_urls, CALM, endpoint=ENDPOINT, clients=8) as load:
        time.sleep(1.0)
        started = time.time()
        done = subprocess.run(
            [str(BIN / "serving"), "reload", "--timeout", "90"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        ended = time.time()
        time.sleep(1.0)
    new = workers(master)
    during = [a for a in load.answers if a.gateway == 0 and started <= a.sent <= ended]
    slowest = max(a.received - a.sent for a in during)
    print(
        f"\n`serving reload` of gateway host 0 ({len(old)} workers) under load took {ended - started:.1f}s: "
        f"{len(load.failed())} of {len(load.answers)} requests failed, {len(during)} sent to that host meanwhile "
        f"(slowest {slowest:.2f}s); workers {old} -> {new}; it said:\n{done.stderr}{done.stdout}"
    )
    assert done.returncode == 0, done.stderr
    assert "reloaded, 2 new workers accepting" in done.stdout + done.stderr
    assert len(new) == len(old) and not set(new) & set(old), "every worker replaced"
    assert all(accepting(pid, [fleet.gateway_port], master) for pid in new)
    assert load.failed() == [], load.failed()[:5]
    assert len(during) > 20 and {a.version for a in during} <= live, "answered by loaded workers only"


class FailoverClients:
    """`clients` threads posting to both gateway hosts in turn, each request that a host refused or closed before any
    answer (a host stopping or not yet started) sent once more to the other host, as a load balancer in front of them
    does. Each answer: (host, status, whether it was sent again)."""

    def __init__(self, fleet: Fleet, clients: int = 8):
        self.urls = [f"{url}/serve/{ENDPOINT}" for url in fleet.gateway_urls]
        self.answers: list[tuple[int, int, bool]] = []
        self.stopped = threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(clients)]

    def __enter__(self) -> FailoverClients:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        for thread in self.threads:
            thread.join()

    def _client(self, index: int) -> None:
        with httpx.Client(timeout=30) as client:
            for turn in itertools.count(index):
                if self.stopped.is_set():
                    return
                host, again = turn % 2, False
                for attempt in (host, 1 - host):
                    try:
                        code = client.post(self.urls[attempt], json={"text": CALM[turn % len(CALM)]}).status_code
                    except (httpx.ConnectError, httpx.RemoteProtocolError):
                        code, again = -1, True  # nothing was answered: the other host gets it
                        continue
                    except httpx.HTTPError:
                        code = -1  # cut off mid-answer, or no answer in time: a failure, not sent again
                    host = attempt
                    break
                self.answers.append((host, code, again))
                time.sleep(0.02)


def test_gateway_hosts_restarted_one_at_a_time_behind_a_failover_client_fail_no_request(fleet: Fleet):
    settled(fleet)
    tritons = [f"{address}:{fleet.ports.grpc}" for address in TRITONS]
    urls = {"state_url": fleet.state_url, "tracking_uri": fleet.tracking_uri}
    restarted = []
    with FailoverClients(fleet) as load:
        time.sleep(1.0)
        for index, (host, workers_) in enumerate(zip(fleet.gateways, WORKERS_PER_GATEWAY, strict=True)):
            started = time.time()
            host.launcher.stop_all()  # SIGTERM: gunicorn closes its port and drains what is in flight
            spec = gateway_spec(
                host, fleet.gateway_port, tritons=tritons, workers=workers_, env={"GATEWAY_ADMIN_TOKEN": TOKEN}, **urls
            )
            host.start(spec)
            host.wait_ready(120)
            fleet.hosts.wait_for(f"gateway host {index} serving", lambda i=index: all(fleet.answered_by(i, 4)), 60)
            restarted.append(time.time() - started)
        time.sleep(1.0)
    failed = [a for a in load.answers if a[1] != 200]
    again = [a for a in load.answers if a[2]]
    print(
        f"\ngateway hosts restarted one at a time in {[round(s, 1) for s in restarted]}s under 8 failover clients: "
        f"{len(failed)} of {len(load.answers)} requests failed, {len(again)} refused by a stopping or starting host "
        f"and answered by the other"
    )
    assert failed == [], failed[:5]
    assert {host for host, code, _ in load.answers[-40:]} == {0, 1}, "both hosts serve again"

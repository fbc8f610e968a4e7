"""The shared deployment state on a real PostgreSQL server (`tests/support/postgres.py`): two processes changing it at
once lose no change; a real gateway (two workers, Triton behind it) follows it, a change reaching every worker within
2 s at the default poll interval; with the store stopped the gateway keeps serving the last state and says so in
`/health/ready` and `/metrics`, and catches up once the store is back."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable

import httpx
import pytest

from services.lifecycle.deployments import EndpointState, Phase, RolloutPolicy, VersionState
from services.lifecycle.store import DeploymentStore, StateStoreUnavailable
from services.triton.repository import RenderOptions
from tests.support.servers import Server, start_gateway, start_triton
from tests.support.state import controllers_copy

WRITER = """
import sys
from services.lifecycle.deployments import EndpointState
from services.lifecycle.store import DeploymentStore
store = DeploymentStore.open(sys.argv[1])
def change(state, i):
    state.endpoints["shared"].rollout_policy.min_requests += 1  # one field in every writer: a lost update shows
    state.endpoints[f"{sys.argv[2]}{i}"] = EndpointState()
for i in range(int(sys.argv[3])):
    store.update(lambda state: change(state, i))
"""


@pytest.fixture(scope="module")
def url(postgres) -> str:
    return postgres.create_database("state_store_tests")


@pytest.fixture(scope="module")
def store(url) -> DeploymentStore:
    store = DeploymentStore.open(url)
    yield store
    store.close()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, tiny_model, store, url):
    """A gateway of two workers over Triton's encoder, deployed as endpoint `encoder` (version 1) in the store."""
    run = tmp_path_factory.mktemp("pg-gateway")
    copy = controllers_copy(run / "models", "encoder", "1", tiny_model)  # the controller's, on the gateway's host
    live = VersionState(version="1", state="live", model_dir=str(copy))
    store.update(lambda s: s.endpoints.update(encoder=EndpointState(versions={"1": live})))
    triton = start_triton(
        tmp_path_factory.mktemp("pg-triton"), tiny_model, RenderOptions(batching=True), models=("encoder",)
    )
    env = {
        "SERVING_STATE_URL": url,
        "GATEWAY_ENDPOINTS_POLL_INTERVAL": "1.0",  # the default poll interval
        "GATEWAY_CONTROLLER_MODELS_DIR": str(run / "models"),
    }
    server = start_gateway(run, tiny_model, triton, workers=2, env=env)
    yield server
    server.launcher.stop_all()
    triton.stop()


def test_two_processes_changing_the_state_at_once_lose_no_change(store, url):
    store.update(lambda s: s.endpoints.update(shared=EndpointState(rollout_policy=RolloutPolicy(min_requests=1))))
    start = store.revision()
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, url, name, "40"]) for name in ("a", "b")]
    assert [writer.wait(timeout=120) for writer in writers] == [0, 0]
    state = store.read()
    assert state.endpoints["shared"].rollout_policy.min_requests == 81, "every increment of the one field counted"
    assert {f"{n}{i}" for n in "ab" for i in range(40)} <= set(state.endpoints)
    assert store.revision() == start + 80
    store.update(lambda s: [s.endpoints.pop(name) for name in list(s.endpoints) if name != "encoder"])


def serves(gateway: Server) -> int:
    return httpx.post(f"{gateway.url}/serve/encoder", json={"text": "hello world"}, timeout=10).status_code


def ready(gateway: Server) -> tuple[int, dict]:
    answer = httpx.get(f"{gateway.url}/health/ready", timeout=10)
    return answer.status_code, answer.json()


def store_up(gateway: Server) -> float | None:
    metrics = httpx.get(f"{gateway.url}/metrics", timeout=10).text
    found = re.search(r'^serving_state_store_up\{backend="postgresql"\} (\S+)$', metrics, re.M)
    return float(found.group(1)) if found else None


def settled(check: Callable[[], bool], timeout: float, times: int = 10) -> float:
    """Seconds until `check` held `times` times in a row (new connections: any worker may answer each one)."""
    started = time.monotonic()
    first, row = None, 0
    while row < times:
        assert time.monotonic() - started < timeout, f"not settled within {timeout}s"
        if check():
            first, row = first or time.monotonic(), row + 1
        else:
            first, row = None, 0
            time.sleep(0.05)
    return first - started


def set_state(store: DeploymentStore, phase: str) -> None:
    store.update(lambda s: setattr(s.endpoints["encoder"].versions["1"], "state", Phase(phase)))


def test_a_change_reaches_every_gateway_worker_within_2_s(gateway, store):
    assert serves(gateway) == 200 and ready(gateway)[1]["state_store"] == "ok"
    took = []
    for phase, expected in [("draining", 404), ("live", 200)]:
        set_state(store, phase)
        took.append(settled(lambda expected=expected: serves(gateway) == expected, timeout=10))
    print(f"\nstate change -> every worker switched after {took[0]:.2f} s (drain) and {took[1]:.2f} s (live again)")
    assert max(took) <= 2.0, took


def test_with_the_store_stopped_the_gateway_serves_the_last_state_says_so_and_catches_up(gateway, store, postgres):
    assert store_up(gateway) == 1.0
    postgres.stop()
    try:
        # a worker that polled while the server was shutting down says so until its next poll: wait for every
        # worker to say what a stopped server answers
        took = settled(lambda: "Connection refused" in ready(gateway)[1]["state_store"], timeout=10)
        status, body = ready(gateway)
        print(f"\nstore stopped -> every worker said so after {took:.2f} s: {body['state_store']}")
        assert status == 200 and body["state_store"].startswith("unreachable: "), body
        settled(lambda: store_up(gateway) == 0.0, timeout=10, times=1)  # the lowest of the workers' gauges
        assert {serves(gateway) for _ in range(20)} == {200}, "the last state keeps serving"
    finally:
        postgres.start()
    back = settled(lambda: ready(gateway)[1]["state_store"] == "ok", timeout=10)
    # ten answers in a row may all come from one worker: the gauge is the lowest over the workers, so it is 1 only
    # once every worker polled the store again
    settled(lambda: store_up(gateway) == 1.0, timeout=10, times=1)
    set_state(store, "draining")
    caught_up = settled(lambda: serves(gateway) == 404, timeout=10)
    print(f"store back -> 'ok' after {back:.2f} s; a change after that served within {caught_up:.2f} s")
    set_state(store, "live")


def test_tables_dropped_after_they_were_seen_are_a_lost_state_until_restored_and_accepted(postgres):
    """pg_dump's job is PostgreSQL's: here the state is kept aside by hand, the tables dropped, and a dump's older
    state put back; `serving state accept` makes the process that saw a later revision take it."""
    from services.lifecycle.store.backup import accept

    url = postgres.create_database("state_lost_tests")
    seen = DeploymentStore.open(url)
    for name in ("a", "b", "c"):
        seen.update(lambda s, name=name: s.endpoints.setdefault(name, EndpointState()))
    dump = seen.read()
    with seen.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE serving_deployment_state, serving_replica_reports")
    with pytest.raises(StateStoreUnavailable, match="lost its state: the store was read before, now its tables are"):
        seen.read()
    with pytest.raises(StateStoreUnavailable, match="pg_restore, then run `serving state accept`"):
        seen.update(lambda s: s.endpoints.clear())
    fresh = DeploymentStore.open(url)  # a process started now: it never saw a state, so it creates the tables
    assert fresh.read().endpoints == {} and fresh.revision() == 0
    with pytest.raises(StateStoreUnavailable, match="the store holds revision 0, older than revision 3 this host saw"):
        seen.read()
    fresh.update(lambda s: s.endpoints.update(dump.endpoints))  # what pg_restore of the dump would put back
    with pytest.raises(StateStoreUnavailable, match="older than revision 3"):
        seen.read()
    summary = accept(fresh)
    assert summary.stamp.epoch > 0 and summary.stamp.revision == 1
    assert sorted(seen.read().endpoints) == ["a", "b", "c"] and seen.stamp() == summary.stamp
    seen.close()
    fresh.close()

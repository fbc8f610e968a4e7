"""The deployment state store over embedded SQLite: compare-and-swap updates that lose no change (threads and
processes at once), a revision that grows with each change, a change that raises or changes nothing writes nothing,
replica reports with a TTL, the old state file imported once, and clear errors for a bad URL or a store away."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import threading

import pytest

from services.common.errors import ConfigurationError, Unavailable
from services.lifecycle.deployments import EndpointState, VersionState
from services.lifecycle.store import DeploymentStore, StateStoreUnavailable
from tests.support.state import stored, write_document


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'lifecycle' / 'state.db'}"


@pytest.fixture
def store(url) -> DeploymentStore:
    store = DeploymentStore.open(url)
    yield store
    store.close()


def add_endpoints(url: str, prefix: str, count: int) -> None:
    """`count` updates, each adding one endpoint, through a store of its own (a process of its own when forked)."""
    store = DeploymentStore.open(url)
    for i in range(count):
        store.update(lambda s, i=i: s.endpoints.setdefault(f"{prefix}{i}", EndpointState()))
    store.close()


def test_a_new_store_is_empty_at_revision_0_in_wal_mode(store):
    assert store.read().endpoints == {} and store.revision() == 0
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def test_concurrent_updates_from_threads_and_processes_lose_no_change(store, url):
    """Every update reads, changes and swaps on the revision it read: the losers of each race apply their change
    again on the winner's state, so 4 processes and 8 threads at once lose none of their 120 changes."""
    forked = multiprocessing.get_context("fork")
    processes = [forked.Process(target=add_endpoints, args=(url, f"p{n}-", 15)) for n in range(4)]
    threads = [threading.Thread(target=add_endpoints, args=(url, f"t{n}-", 8)) for n in range(8)]
    for worker in processes + threads:
        worker.start()
    for worker in processes + threads:
        worker.join(timeout=60)
    assert [p.exitcode for p in processes] == [0] * 4
    assert len(store.read().endpoints) == 4 * 15 + 8 * 8
    assert store.revision() == 124, "one revision a change, none lost, none doubled"


def test_the_revision_grows_with_each_change_and_only_then(store):
    seen = [store.revision()]
    for version in ("1", "2"):
        store.update(
            lambda s, v=version: s.endpoints.setdefault("e", EndpointState()).versions.update(
                {v: VersionState(version=v)}
            )
        )
        seen.append(store.revision())
    store.update(lambda s: s.endpoints["e"].versions["1"].version)  # reads only
    seen.append(store.revision())
    assert seen == [0, 1, 2, 2]
    assert store.update(lambda s: sorted(s.endpoints["e"].versions)) == ["1", "2"], "the change's result returned"


def test_a_change_that_raises_writes_nothing(store):
    store.update(lambda s: s.endpoints.setdefault("e", EndpointState(versions={"1": VersionState(version="1")})))
    before = stored(store)

    def broken(state):
        state.endpoints.clear()
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError):
        store.update(broken)
    assert stored(store) == before
    assert json.loads(before[1])["endpoints"]["e"]["versions"]["1"]["state"] == "loading"


def test_an_update_that_keeps_losing_gives_up_with_a_503_after_its_tries(store, url):
    """Each try's change is applied to the state as it is then; here another writer wins every race."""
    other = DeploymentStore.open(url)
    store.ATTEMPTS = 3
    calls = []

    def change(state):
        calls.append(len(state.endpoints))
        other.update(lambda s: s.endpoints.setdefault(f"other{len(calls)}", EndpointState()))
        state.endpoints["mine"] = EndpointState()

    with pytest.raises(Unavailable, match="changed under 3 tries"):
        store.update(change)
    assert calls == [0, 1, 2], "each try saw the state the previous winner left"
    assert "mine" not in store.read().endpoints and store.revision() == 3


def test_an_invalid_document_is_a_configuration_error_naming_its_revision(store):
    write_document(store, '{"endpoints": {"e": {"versions": 3}}}')
    with pytest.raises(ConfigurationError, match=r"deployment state \(revision 1\) is invalid"):
        store.read()
    with pytest.raises(ConfigurationError):
        store.update(lambda s: None)
    assert store.revision() == 1


def test_replica_reports_replace_each_other_and_age_out_after_the_ttl(store):
    store.report_replica("triton-a", {"emb": ["10", "2", "2"]}, now=100.0)
    store.report_replica("triton-b", {"emb": ["2"]}, now=100.0)
    store.report_replica("triton-a", {"emb": ["2", "10"], "other": []}, now=105.0)
    assert store.replicas(now=108.0, ttl=10.0) == {
        "triton-a": {"emb": ["2", "10"], "other": []},
        "triton-b": {"emb": ["2"]},
    }
    assert store.replicas(now=112.0, ttl=10.0) == {"triton-a": {"emb": ["2", "10"], "other": []}}, "b is too old"
    assert store.replicas(now=200.0, ttl=10.0) == {}
    assert store.revision() == 0, "reports are not the desired state"


def test_a_report_from_far_ahead_or_holding_no_version_lists_is_left_out_and_said(store, caplog):
    """Before: a report at 1e308 counted for ever (its replica lacking every new version held it in `loading`), and
    one holding a list made the controller's every tick fail."""
    store.report_replica("good", {"emb": ["2"]}, now=100.0)
    store.report_replica("ahead", {}, now=1e308)
    store.report_replica("skewed", {"emb": ["2"]}, now=105.0)
    store.report_replica("odd", {}, now=100.0)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE serving_replica_reports SET ready = '[1]' WHERE replica = 'odd'")
    assert store.replicas(now=100.0, ttl=10.0) == {"good": {"emb": ["2"]}, "skewed": {"emb": ["2"]}}
    said = [r.getMessage() for r in caplog.records if "report is left out" in r.getMessage()]
    assert len(said) == 2 and any("ahead of this host's clock" in line for line in said), said
    store.replicas(now=101.0, ttl=10.0)
    assert len([r for r in caplog.records if "report is left out" in r.getMessage()]) == 2, "said once"


def test_a_report_over_its_size_bound_is_left_out_unparsed(store, caplog):
    """Before: a 60 MB report was parsed on every tick (2.6 s each)."""
    store.report_replica("huge", {"emb": [str(n) for n in range(200_000)]}, now=100.0)
    store.report_replica("good", {"emb": ["2"]}, now=100.0)
    assert store.replicas(now=100.0, ttl=10.0) == {"good": {"emb": ["2"]}}
    assert any("bytes, over 1048576" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("not a url", "is not a database URL; use sqlite:///<path> or postgresql"),
        ("mysql://u@h/db", "names a mysql database; use sqlite:///<path>"),
        ("sqlite://", "a SQLite state store is a file"),
        ("sqlite:///:memory:", "a SQLite state store is a file"),
    ],
)
def test_a_bad_url_is_a_configuration_error_naming_the_setting(url, says):
    with pytest.raises(ConfigurationError, match="SERVING_STATE_URL") as raised:
        DeploymentStore.open(url)
    assert says in raised.value.message


def test_a_store_that_went_away_is_unavailable_with_the_drivers_reason_and_back_once_it_returns(store, tmp_path):
    store.update(lambda s: s.endpoints.setdefault("e", EndpointState()))
    shutil.move(tmp_path / "lifecycle", tmp_path / "away")
    with pytest.raises(StateStoreUnavailable) as raised:
        store.revision()
    assert raised.value.status_code == 503 and raised.value.reason == "unable to open database file"
    assert store.url in raised.value.message
    shutil.move(tmp_path / "away", tmp_path / "lifecycle")
    assert list(store.read().endpoints) == ["e"]


def test_a_postgresql_store_that_refuses_connections_is_unavailable_at_first_use_not_at_open():
    store = DeploymentStore.open("postgresql+psycopg2://serving:secret@127.0.0.1:1/serving")
    assert "secret" not in store.url
    with pytest.raises(StateStoreUnavailable, match="unreachable") as raised:
        store.read()
    assert "127.0.0.1" in raised.value.reason and "secret" not in raised.value.message


def test_a_state_row_deleted_by_hand_is_an_error_not_an_empty_state(store):
    """An empty state would make every gateway drop its deployed endpoints; an error keeps the last state serving."""
    store.update(lambda s: s.endpoints.setdefault("e", EndpointState()))
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM serving_deployment_state")
    with pytest.raises(ConfigurationError, match="row is missing from table serving_deployment_state"):
        store.read()

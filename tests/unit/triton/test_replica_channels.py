"""The replicas of a `dns:` name, resolved again (`least_work` keeps a channel per address): every address the name
resolves to becomes a replica; a name that resolves to nothing is a 503 until it does; a list is taken as it is."""

import asyncio
import time

import pytest
from prometheus_client import REGISTRY

from services.common.errors import Unavailable
from services.triton import replica_channels
from services.triton.balancer import REASONS
from services.triton.replica_channels import ReplicaChannels
from services.triton.target import parse_target


def channels(url: str) -> ReplicaChannels:
    return ReplicaChannels(parse_target(url), close_grace=1, retry_after=1)


def test_a_name_becomes_every_address_it_resolves_to():
    replicas = channels("dns:///localhost:8001")
    asyncio.run(replicas.refresh())
    assert "127.0.0.1:8001" in replicas.balancer.replicas
    assert set(replicas.balancer.replicas) <= {"127.0.0.1:8001", "[::1]:8001"}


def test_a_name_that_resolves_to_nothing_is_a_503_until_it_does():
    replicas = channels("dns:///no-such-replica.invalid:8001")
    with pytest.raises(Unavailable, match="resolves to no address"):
        asyncio.run(replicas.refresh())
    assert replicas.balancer.replicas == {}


def test_replicas_gone_from_the_answer_leave_and_new_ones_join(monkeypatch):
    answers = iter([["10.0.0.1", "10.0.0.2"], ["10.0.0.2", "10.0.0.3"]])

    async def getaddrinfo(self, host, port, **kwargs):
        return [(None, None, None, "", (ip, port)) for ip in next(answers)]

    monkeypatch.setattr(asyncio.BaseEventLoop, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(replica_channels, "RESOLVE_EVERY", 0.0)
    replicas = channels("dns:///triton-grpc:8001")

    async def twice():
        await replicas.refresh()
        first = set(replicas.balancer.replicas)
        await replicas.refresh()
        return first, set(replicas.balancer.replicas)

    assert asyncio.run(twice()) == ({"10.0.0.1:8001", "10.0.0.2:8001"}, {"10.0.0.2:8001", "10.0.0.3:8001"})


def test_a_list_is_taken_as_it_is():
    replicas = channels("127.0.0.2:8001,127.0.0.3:8001")
    asyncio.run(replicas.refresh())
    assert list(replicas.balancer.replicas) == ["127.0.0.2:8001", "127.0.0.3:8001"]


def ejected_gauge(address: str) -> dict[str, float]:
    return {
        reason: REGISTRY.get_sample_value("serving_triton_replica_ejected", {"replica": address, "reason": reason})
        for reason in REASONS
    }


def test_the_ejected_gauge_follows_an_ejection_that_changed_its_reason_and_its_end():
    pool = channels("127.0.0.2:8001,127.0.0.3:8001")
    balancer, address = pool.balancer, "127.0.0.3:8001"
    balancer.failed(balancer.start(1, "emb", exclude=["127.0.0.2:8001"]), "unavailable")
    assert ejected_gauge(address) == {"unavailable": 1, "internal": 0, "not_found": 0, "slow": 0}
    later = time.monotonic() + 60.0
    balancer.clock = lambda: later  # its ejection over: the next call probes it
    balancer.failed(balancer.start(1, "emb"), "internal")  # the probe failed otherwise: the same ejection, renamed
    assert ejected_gauge(address) == {"unavailable": 0, "internal": 1, "not_found": 0, "slow": 0}
    balancer.clock = lambda: later + 60.0
    balancer.succeeded(balancer.start(1, "emb"))
    assert ejected_gauge(address) == {"unavailable": 0, "internal": 0, "not_found": 0, "slow": 0}


def test_a_call_sent_before_an_answer_ended_its_replicas_ejection_does_not_eject_it_again():
    pool = channels("127.0.0.2:8001,127.0.0.3:8001")
    balancer, now = pool.balancer, [time.monotonic()]
    balancer.clock = lambda: now[0]
    balancer.failed(balancer.start(1, "emb", exclude=["127.0.0.2:8001"]), "unavailable")
    now[0] += 1.0
    probe = balancer.start(1, "emb")
    late = balancer.start(1, "emb", exclude=["127.0.0.2:8001"])  # sent while the probe was out
    now[0] += 0.01
    balancer.succeeded(probe)
    balancer.failed(late, "unavailable")
    assert balancer.ejected() == {}

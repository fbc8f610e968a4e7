"""GATEWAY_TRITON_GRPC_URL as gRPC gets it: one address exactly as before (target and channel options), a list of
replicas for gRPC's static resolver, a `dns:` name as is; several replicas balanced per call with keepalive; anything
else refused with the forms that work."""

import pytest

from services.common.errors import ConfigurationError
from services.triton.grpc_client import TritonClient
from services.triton.target import parse_target

# What every gateway channel had before replicas (git history: services/triton/grpc_client.py CHANNEL_OPTIONS).
OPTIONS_BEFORE = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


@pytest.mark.parametrize("url", ["127.0.0.1:8001", "triton:8001", "triton.serving.svc:8001", "[::1]:8001"])
def test_one_address_is_the_target_with_the_options_it_always_had(url):
    target = parse_target(f" {url} ")
    assert (target.target, target.balanced, target.options) == (url, False, OPTIONS_BEFORE)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("127.0.0.2:8001,127.0.0.3:8001", "ipv4:127.0.0.2:8001,127.0.0.3:8001"),
        (" 10.0.0.7:8001 , 10.0.0.8:9001,10.0.0.9:8001", "ipv4:10.0.0.7:8001,10.0.0.8:9001,10.0.0.9:8001"),
        ("[::1]:8001,[fd00::2]:8001", "ipv6:[::1]:8001,[fd00::2]:8001"),
        ("ipv4:127.0.0.2:8001,127.0.0.3:8001", "ipv4:127.0.0.2:8001,127.0.0.3:8001"),
        ("dns:///triton-grpc.serving.svc.cluster.local:8001", "dns:///triton-grpc.serving.svc.cluster.local:8001"),
        ("dns://10.96.0.10:53/triton-grpc:8001", "dns://10.96.0.10:53/triton-grpc:8001"),
    ],
)
def test_several_replicas_are_balanced_per_call_with_keepalive(url, expected):
    target = parse_target(url)
    assert target.target == expected and target.balanced
    options = dict(target.options)
    assert options["grpc.lb_policy_name"] == "round_robin"
    # A replica that stops answering is out within seconds: a ping unanswered for 2 s, whichever ping it is (gRPC's
    # default 60 s for its flow-control pings held keepalive back).
    assert options["grpc.keepalive_time_ms"] == 5_000
    assert options["grpc.keepalive_timeout_ms"] == options["grpc.http2.ping_timeout_ms"] == 2_000
    assert "grpc.keepalive_permit_without_calls" not in options, "Triton closes connections that ping while idle"
    assert set(OPTIONS_BEFORE) <= set(target.options)


@pytest.mark.parametrize(
    ("url", "addresses", "dns_name"),
    [
        (" 10.0.0.7:8001 , 10.0.0.8:9001", ("10.0.0.7:8001", "10.0.0.8:9001"), None),
        ("[::1]:8001,[fd00::2]:8001", ("[::1]:8001", "[fd00::2]:8001"), None),
        ("dns:///triton-grpc:8001", (), ("triton-grpc", 8001)),
        ("dns://10.96.0.10:53/triton-grpc:8001", (), ("triton-grpc", 8001)),
    ],
)
def test_each_replica_is_known_for_a_channel_of_its_own(url, addresses, dns_name):
    """`least_work` keeps a channel per replica: a list's addresses, or the name it resolves again."""
    target = parse_target(url)
    assert (target.addresses, target.dns_name) == (addresses, dns_name)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("", "HOST:PORT"),
        ("triton", "HOST:PORT"),
        ("triton:http", "HOST:PORT"),
        ("triton:70000", "HOST:PORT"),
        ("http://triton:8001", "HOST:PORT"),
        ("dns:///triton-grpc", "dns:///NAME:PORT"),
        ("127.0.0.2:8001,", "HOST:PORT"),
        ("triton-0:8001,triton-1:8001", "names a host"),
        ("127.0.0.2:8001,127.0.0.2:8001", "127.0.0.2:8001 more than once"),
        ("127.0.0.2:8001,[::1]:8001", "mixes IPv4 and IPv6"),
    ],
)
def test_anything_else_is_refused_naming_the_setting_and_the_forms_that_work(url, says):
    with pytest.raises(ConfigurationError) as raised:
        parse_target(url)
    print(f"\n{url!r}: {raised.value}")
    assert "GATEWAY_TRITON_GRPC_URL" in str(raised.value) and says in str(raised.value)


def test_the_client_refuses_a_bad_target_when_built_not_at_its_first_call():
    with pytest.raises(ConfigurationError, match="dns:///NAME:PORT"):
        TritonClient("triton-0:8001,triton-1:8001", timeout=1, retry_after=1)

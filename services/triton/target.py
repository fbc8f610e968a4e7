"""Where the gateway's gRPC channel to Triton goes (`GATEWAY_TRITON_GRPC_URL`), and the channel options that go with
it.

- `host:port`: one Triton, as always; the channel gets exactly the options it always had.
- `IP:port,IP:port,...`: several replicas, passed to gRPC's static `ipv4:`/`ipv6:` resolver.
- `dns:///name:port`: every address the name resolves to (a Kubernetes headless Service), resolved again every few
  seconds (`least_work`: `services.triton.replica_channels`) or whenever a connection closes (`round_robin`: Triton's
  `--grpc-max-connection-age` makes that happen on a timer), so replicas added later are found.

Several replicas (a list or a `dns:` name) get a connection to each address and keepalive pings: with
`GATEWAY_TRITON_BALANCE=least_work` (the default) one channel per replica and the gateway's own choice of replica for
each call (`services.triton.balancer`); with `round_robin` one channel under gRPC's own `round_robin` policy, each
call sent to the next ready replica. Keepalive pings mean a replica that stops answering without closing its
connection (a host gone, a process frozen) fails its calls within seconds; a replica whose connection closed is left
out at once and reconnected in the background (at least every second: `grpc.max_reconnect_backoff_ms`).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from services.common.errors import ConfigurationError

SETTING = "GATEWAY_TRITON_GRPC_URL"
# A reconnect at least every second while Triton is away: with gRPC's default backoff (up to 120 s, x1.6 a try) the
# first request succeeded 3.5-6 s after a restarted Triton was ready; with this, 0.2-0.3 s.
SINGLE_OPTIONS: tuple[tuple[str, int | str], ...] = (
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_reconnect_backoff_ms", 1000),
)
# A replica that stops answering without closing its connection (frozen, its host gone) is dropped when a ping goes
# unanswered for 2 s: gRPC's flow-control (BDP) ping, sent as answers arrive, or a keepalive ping after 5 s without
# reads while calls are in flight. Its calls then fail UNAVAILABLE and are sent once more (`grpc_client`); with
# gRPC's default ping timeout (60 s) an outstanding flow-control ping holds keepalive back
# (docs/decisions/triton-defaults.md). Triton's server (gRPC's defaults) closes a connection whose fourth ping comes
# while it sent nothing since the first: 20 s of silence with calls in flight, twice the gateway's default deadline.
# No pings without calls in flight.
REPLICA_OPTIONS: tuple[tuple[str, int | str], ...] = (
    *SINGLE_OPTIONS,
    ("grpc.keepalive_time_ms", 5_000),
    ("grpc.keepalive_timeout_ms", 2_000),
    ("grpc.http2.ping_timeout_ms", 2_000),
)
"""The channel to each replica of several (`least_work`: `services.triton.balancer`)."""
BALANCED_OPTIONS: tuple[tuple[str, int | str], ...] = (*REPLICA_OPTIONS, ("grpc.lb_policy_name", "round_robin"))
"""The one channel to every replica (`round_robin`)."""
_HOST_PORT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.%\w]+\]|[^\s:/,\[\]]+):(?P<port>\d{1,5})$")


@dataclass(frozen=True)
class TritonTarget:
    """What `grpc.aio.insecure_channel` gets: the target string and its options."""

    target: str
    balanced: bool
    """Several replicas behind the target (a list or a `dns:` name): balanced, keepalive, a lost call retried."""
    addresses: tuple[str, ...] = ()
    """A list's replicas (`IP:PORT`, an IPv6 address in brackets); empty for a `dns:` name (`dns_name`)."""
    dns_name: tuple[str, int] | None = None
    """A `dns:` name's host and port, resolved to the replicas' addresses."""

    @property
    def options(self) -> list[tuple[str, int | str]]:
        return list(BALANCED_OPTIONS if self.balanced else SINGLE_OPTIONS)


def parse_target(url: str) -> TritonTarget:
    """The gRPC target of `url` (one `host:port`, a comma list of `IP:port`, or `dns:///name:port`); a clear error
    naming the setting and the fix for anything else."""
    text = url.strip()
    if text.startswith("dns:"):
        host, port = _host_port(text.removeprefix("dns:").lstrip("/").split("/")[-1], url)  # dns://authority/ too
        return TritonTarget(text, balanced=True, dns_name=(host.strip("[]"), port))
    if text.startswith(("ipv4:", "ipv6:")):
        text = text.split(":", 1)[1]
    if "," not in text:
        _host_port(text, url)
        return TritonTarget(text, balanced=False)
    families = {_ip_port(item.strip(), url) for item in text.split(",")}
    addresses = [item.strip() for item in text.split(",")]
    duplicates = sorted({a for a in addresses if addresses.count(a) > 1})
    if duplicates:
        raise ConfigurationError(f"{SETTING}={url!r} lists {', '.join(duplicates)} more than once")
    if len(families) > 1:
        raise ConfigurationError(f"{SETTING}={url!r} mixes IPv4 and IPv6 addresses: list one family only")
    return TritonTarget(f"{families.pop()}:{','.join(addresses)}", balanced=True, addresses=tuple(addresses))


def _host_port(text: str, url: str) -> tuple[str, int]:
    match = _HOST_PORT.match(text)
    if match is None or not 0 < int(match["port"]) < 65536:
        raise ConfigurationError(
            f"{SETTING}={url!r} is not a Triton gRPC address: give HOST:PORT (one Triton), IP:PORT,IP:PORT,... "
            "(several replicas) or dns:///NAME:PORT (every address NAME resolves to)"
        )
    return match["host"], int(match["port"])


def _ip_port(item: str, url: str) -> str:
    """`item`'s address family (`ipv4` or `ipv6`): a list takes IP addresses only, as gRPC's static resolvers do."""
    host, _ = _host_port(item, url)
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        raise ConfigurationError(
            f"{SETTING}={url!r}: a list takes IP:PORT items and {item!r} names a host; list the replicas' IP "
            "addresses, or give dns:///NAME:PORT for a name that resolves to every replica"
        ) from None
    return f"ipv{address.version}"

"""One gRPC channel per Triton replica and the worker's `Balancer` over them (`GATEWAY_TRITON_BALANCE=least_work`):
a list's replicas, or every address a `dns:` name resolves to, resolved again every `RESOLVE_EVERY` seconds (a
replica added to a headless Service is found; one removed has its channel closed once its calls had time to end).
Replicas leaving and rejoining the rotation are logged and counted (`serving_triton_replica_ejected`,
`serving_triton_ejections_total`: one series per replica address and reason)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import grpc
from tritonclient.grpc import service_pb2_grpc

from observability.metrics import TRITON_EJECTIONS, TRITON_REPLICA_EJECTED
from services.common.errors import Unavailable
from services.triton.balancer import REASONS, Balancer
from services.triton.target import REPLICA_OPTIONS, TritonTarget

log = logging.getLogger(__name__)

RESOLVE_EVERY = 5.0


class ReplicaChannels:
    def __init__(self, target: TritonTarget, *, close_grace: float, retry_after: float):
        self.target, self.close_grace, self.retry_after = target, close_grace, retry_after
        self.balancer = Balancer(target.addresses, clock=time.monotonic, listener=self._report)
        self.stubs: dict[str, service_pb2_grpc.GRPCInferenceServiceStub] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._closing: set[asyncio.Task] = set()
        self._resolved_at = float("-inf")

    def stub(self, address: str) -> service_pb2_grpc.GRPCInferenceServiceStub:
        """The stub of `address`'s own channel, created on first use inside the worker's event loop."""
        if address not in self.stubs:
            family = "ipv6" if address.startswith("[") else "ipv4"
            self._channels[address] = grpc.aio.insecure_channel(f"{family}:{address}", options=list(REPLICA_OPTIONS))
            self.stubs[address] = service_pb2_grpc.GRPCInferenceServiceStub(self._channels[address])
        return self.stubs[address]

    async def refresh(self) -> None:
        """Resolve a `dns:` name again when its last answer is `RESOLVE_EVERY` seconds old; a failed lookup keeps the
        replicas it had (none yet: 503)."""
        if self.target.dns_name is None or time.monotonic() - self._resolved_at < RESOLVE_EVERY:
            return
        self._resolved_at = time.monotonic()
        host, port = self.target.dns_name
        try:
            found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            log.warning(
                "Triton replicas: %s does not resolve (%s); keeping the %d known",
                host,
                exc,
                len(self.balancer.replicas),
            )
            found = []
        addresses = sorted({_address(str(info[4][0]), port) for info in found})
        if addresses:
            for gone in set(self.balancer.replicas) - set(addresses):
                self._close(gone)
            self.balancer.set_addresses(addresses)
        if not self.balancer.replicas:
            self._resolved_at = float("-inf")
            raise Unavailable(f"no Triton replica: {host} resolves to no address", retry_after=self.retry_after)

    def _close(self, address: str) -> None:
        self.stubs.pop(address, None)
        channel = self._channels.pop(address, None)
        if channel is not None:
            task = asyncio.get_running_loop().create_task(channel.close(grace=self.close_grace))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        self.stubs.clear()

    def _report(self, address: str, reason: str, ejected: bool) -> None:
        """Log the change and set the replica's gauge for every reason from what the balancer holds now (an ejection
        replaced by one for another reason ends the first reason's)."""
        held = {e.reason for (a, _), e in self.balancer.ejections.items() if a == address}
        if (replica := self.balancer.replicas.get(address)) is not None and replica.slow:
            held.add("slow")
        for each in REASONS:
            TRITON_REPLICA_EJECTED.labels(address, each).set(1 if each in held else 0)
        if ejected:
            TRITON_EJECTIONS.labels(address, reason).inc()
            back = "copies of calls, no caller waiting, show" if reason == "slow" else "a call will probe"
            log.warning("Triton replica %s is out of rotation (%s); %s when it is back", address, reason, back)
        else:
            log.info("Triton replica %s is back in rotation", address)


def _address(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"

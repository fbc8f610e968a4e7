"""Every port a stack binds, with the `serving up` option that moves it: checked all at once before the first
process starts (`services.launcher.check_ports`)."""

from __future__ import annotations

from services.launcher import PortClaim, ProcessSpec
from services.stacks.options import StackOptions


def port_option(options: StackOptions, process: str, port: int) -> str | None:
    """The `serving up` option that sets `port` of `process`; started by `make up`, the knob it has for it (`PORT`,
    `TRITON_HTTP_PORT`, ..., and the controller's variable)."""
    if process == "traces":
        return "TRACE_PORT" if options.via_make else "--trace-port"
    if process == "controller":
        return "CONTROLLER_METRICS_PORT" if options.via_make else "--controller-metrics-port"
    if process == "triton":
        ports = options.triton_ports
        option = {ports.http: "--triton-http-port", ports.grpc: "--triton-grpc-port"}.get(
            port, "--triton-metrics-port" if port == ports.metrics else None
        )
        return option.removeprefix("--").replace("-", "_").upper() if option and options.via_make else option
    if process == "gateway" and port == options.grpc_port:
        return "GRPC_PORT" if options.via_make else "--grpc-port"
    if port != options.port:
        return None
    return "PORT" if options.via_make else "--port"


def unclaimed_ports(options: StackOptions) -> frozenset[int]:
    """Ports a process of the stack binds that are not checked before the start: the gateway's own gRPC port when
    `grpc_port` is not given (`GATEWAY_GRPC_PORT`'s default, 8081). A port suggested in place of a busy one is none
    of these (`PORT=8081` would have collided with it)."""
    if options.stack != "clearml" or options.grpc_port is not None:
        return frozenset()
    from services.gateway.settings import GatewaySettings

    return frozenset({GatewaySettings.model_fields["grpc_port"].default})


def port_claims(options: StackOptions, specs: list[ProcessSpec]) -> list[PortClaim]:
    """Each port the stack's processes bind, the process that binds it and the option that sets it."""
    return [PortClaim(port, spec.name, port_option(options, spec.name, port)) for spec in specs for port in spec.ports]

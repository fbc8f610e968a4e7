"""`serving up` and `serving down`: start a stack and keep it up (in the foreground, or detached with pid files in
the run directory; `supervise`), and stop everything recorded there, from any shell."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from services.commands.supervise import announce, plan_stack, run_supervisor, start_detached, start_stack
from services.common.cli import console, fail
from services.common.devices import DEFAULT_FIXED_US, DEFAULT_PER_TOKEN_US, device_refusal, gpu_present
from services.common.private import PRIVATE_UMASK
from services.common.settings import RunSettings, unread_endpoints_file

if TYPE_CHECKING:  # imported where used, so that `serving --help` stays quick
    from services.stacks import StackOptions

# `serving up`'s options, in the order of its signature.
STACK = typer.Option("clearml", help="clearml (the gateway) | fastapi | triton")
WORKERS = typer.Option(1, min=1, help="HTTP worker processes.")
BATCHING = typer.Option("on", help="Triton dynamic batching: on | off.")
PORT = typer.Option(8080, help="HTTP port of the stack's API.")
HOST = typer.Option("0.0.0.0", help="Address to bind.")
MODEL_DIR = typer.Option(Path("build/model"), help="Exported model directory.")
ENDPOINT = typer.Option(None, help="Name of the built-in endpoint; default: the model's (`minilm`).")
TRITON_HTTP_PORT = typer.Option(8000, help="Triton HTTP (KServe v2) port.")
TRITON_GRPC_PORT = typer.Option(8001, help="Triton gRPC port.")
TRITON_METRICS_PORT = typer.Option(8002, help="Triton Prometheus metrics port.")
TRITON_ADDRESS = typer.Option("127.0.0.1", help="Where Triton's ports bind (only the API port is public).")
GRPC_PORT = typer.Option(
    None,
    envvar="GATEWAY_GRPC_PORT",
    help="clearml: the gateway's Open Inference Protocol over gRPC (tritonclient.grpc); 0: none; unset: 8081, the "
    "gateway's default, not checked before the start.",
)
CONTROLLER_METRICS_PORT = typer.Option(
    9108, envvar="CONTROLLER_METRICS_PORT", help="clearml: the controller's /metrics port, on 127.0.0.1."
)
PADDING = typer.Option("ragged", help="How variable-length inputs batch in Triton: ragged | bucket.")
TRITON_MAX_QUEUE = typer.Option(
    0,
    min=0,
    help="Bound Triton's queues (503 past it); 0: unbounded (a bound lengthens the p99 tail: "
    "docs/decisions/triton-defaults.md).",
)
SPIN = typer.Option(
    False,
    help="ONNX Runtime's threads in Triton's encoder spin between runs: a lower p50 at low load, cores burnt while "
    "idle, less throughput when the cores are shared (docs/decisions/triton-defaults.md).",
)
DEVICE = typer.Option(
    "cpu",
    help="Where the encoder runs: cpu (ONNX Runtime) | cuda (ONNX Runtime's CUDA provider on an NVIDIA GPU; refused, "
    "naming what is missing, where there is none) | sim (a simulated accelerator: one device, batches wait "
    "SIM_FIXED_US + SIM_PER_TOKEN_US x padded tokens, no CPU).",
)
SIM_FIXED_US = typer.Option(DEFAULT_FIXED_US, min=0.0, help="--device sim: device time of every batch, us.")
SIM_PER_TOKEN_US = typer.Option(DEFAULT_PER_TOKEN_US, min=0.0, help="--device sim: device time a padded token, us.")
ENDPOINTS_FILE = typer.Option(
    None, help="clearml: the gateway's endpoint file; default: endpoints.json in the run directory (SERVING_RUN_DIR)."
)
OTLP_ENDPOINT = typer.Option(
    None, help="Trace every service (Triton included) to this OTLP/HTTP URL, e.g. http://127.0.0.1:4318/v1/traces."
)
TRACES = typer.Option(
    False, help="Collect every span of the stack into its own receiver (run/traces/spans.db) for `serving analyze`."
)
TRACE_RATIO = typer.Option(
    1.0, min=0.0, max=1.0, help="Share of requests without a caller's trace context to trace (traceparent decides)."
)
TRACE_PORT = typer.Option(4318, help="Port of the trace receiver (--traces), on 127.0.0.1.")
DETACH = typer.Option(False, help="Run in the background; return once ready.")
LOG_JSON = typer.Option(
    None, "--log-json/--log-plain", help="JSON log lines (default when detached: run/logs/, read by `serving logs`)."
)
READY_TIMEOUT = typer.Option(180.0, help="Seconds to wait for readiness.")
VIA_MAKE = typer.Option(
    False, envvar="SERVING_VIA_MAKE", hidden=True, help="Started by `make up`: messages name its knobs (PORT=...)."
)


def up(
    stack: str = STACK,
    workers: int = WORKERS,
    batching: str = BATCHING,
    port: int = PORT,
    host: str = HOST,
    model_dir: Path = MODEL_DIR,
    endpoint: str = ENDPOINT,
    triton_http_port: int = TRITON_HTTP_PORT,
    triton_grpc_port: int = TRITON_GRPC_PORT,
    triton_metrics_port: int = TRITON_METRICS_PORT,
    triton_address: str = TRITON_ADDRESS,
    controller_metrics_port: int = CONTROLLER_METRICS_PORT,
    grpc_port: int | None = GRPC_PORT,
    padding: str = PADDING,
    triton_max_queue: int = TRITON_MAX_QUEUE,
    spin: bool = SPIN,
    device: str = DEVICE,
    sim_fixed_us: float = SIM_FIXED_US,
    sim_per_token_us: float = SIM_PER_TOKEN_US,
    endpoints_file: Path | None = ENDPOINTS_FILE,
    otlp_endpoint: str = OTLP_ENDPOINT,
    traces: bool = TRACES,
    trace_ratio: float = TRACE_RATIO,
    trace_port: int = TRACE_PORT,
    detach: bool = DETACH,
    log_json: bool = LOG_JSON,
    ready_timeout: float = READY_TIMEOUT,
    via_make: bool = VIA_MAKE,
) -> None:
    """Start a stack: in the foreground (Ctrl-C stops it) or detached."""
    from services.stacks import StackOptions, Tuning
    from services.triton.server import TritonPorts

    if batching not in ("on", "off"):
        fail(ValueError(f"BATCHING must be on or off, not '{batching}'"))
    if refusal := device_refusal(device, *(local_providers() if device == "cuda" else ([], False))):
        fail(ValueError(refusal))
    run = RunSettings()
    if endpoints_file is None and stack == "clearml" and (note := unread_endpoints_file(run.run_dir)):
        console.print(note, markup=False)
    options = StackOptions(
        stack=stack,
        workers=workers,
        batching=batching == "on",
        host=host,
        port=port,
        model_dir=model_dir,
        run_dir=run.run_dir,
        state_url=run.state_url,
        padding=padding,
        endpoints_file=endpoints_file,
        otlp_endpoint=otlp_endpoint,
        traces=traces,
        trace_ratio=trace_ratio,
        tuning=Tuning(max_queue_size=triton_max_queue or None, spin=spin or None),
        trace_port=trace_port,
        triton_ports=TritonPorts(triton_http_port, triton_grpc_port, triton_metrics_port, triton_address),
        controller_metrics_port=controller_metrics_port,
        grpc_port=grpc_port,
        log_json=detach if log_json is None else log_json,
        endpoint=endpoint,
        device=device,
        sim_fixed_us=sim_fixed_us,
        sim_per_token_us=sim_per_token_us,
        via_make=via_make,
    )
    raise typer.Exit(keep_up(options, detach=detach, ready_timeout=ready_timeout))


def keep_up(options: StackOptions, *, detach: bool, ready_timeout: float) -> int:
    """Detached: a background supervisor starts the stack (`start_detached`). In the foreground: start it here,
    then supervise it until Ctrl-C or `serving down`. What this command writes goes into the run directory, under
    the umask of the stack's processes (`PRIVATE_UMASK`): its owner's alone."""
    from services.stacks import write_stack_info

    os.umask(PRIVATE_UMASK)
    if detach:
        plan_stack(options)  # a taken port or a bad option ends here, before the background supervisor starts
        return start_detached(options, ready_timeout)
    launcher = start_stack(options, detach=False, ready_timeout=ready_timeout)
    write_stack_info(options)
    announce(options, detach=False)
    return run_supervisor(launcher, options, detach=False, ready_timeout=ready_timeout)


def down(
    timeout: float = typer.Option(
        30.0, help="Most seconds a process may drain before SIGKILL (each has its own drain time, if shorter)."
    ),
) -> None:
    """Stop every process `serving` started (up, observability, registry), from any shell: the supervisor first."""
    from services.launcher import stop_recorded
    from services.stacks.metrics_dir import remove_all

    def stopping(name: str, pid: int, drain: float) -> None:
        what = "the stack, each process within its own drain time" if name == "supervisor" else name
        console.print(f"stopping {what} (pid {pid}; SIGKILL after {drain:g} s)...")

    run_dir = RunSettings().run_dir
    stopped = stop_recorded(run_dir, timeout=timeout, stopping=stopping)
    remove_all(run_dir)  # what a supervisor killed with SIGKILL left in memory
    console.print("stopped " + ", ".join(stopped) if stopped else "nothing was running")


def local_providers() -> tuple[list[str], bool]:
    """This machine's ONNX Runtime providers and whether it has an NVIDIA GPU (what `DEVICE=cuda` needs)."""
    import onnxruntime

    return onnxruntime.get_available_providers(), gpu_present()

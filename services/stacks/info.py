"""What `serving status` shows about a stack besides its processes: the model, the knobs, the URLs to call.
`serving up` writes it into the run directory once the stack is ready."""

from __future__ import annotations

import json
from pathlib import Path

from services.common.contract import Manifest
from services.common.private import write_private
from services.gateway.settings import GatewaySettings
from services.launcher.records import STACK_INFO
from services.stacks.options import StackOptions


def stack_info(options: StackOptions) -> dict:
    """The stack, workers and batching, the device, the model served, the URLs to call (the API's, the gateway's gRPC,
    Triton's and the controller's metrics)."""
    manifest = Manifest.load(options.model_dir)
    api = f"http://127.0.0.1:{options.triton_ports.http if options.stack == 'triton' else options.port}"
    urls = {"api": api}
    if options.stack == "triton":
        urls["infer"] = f"{api}/v2/models/ensemble/infer"
    else:
        urls |= {
            "serve": f"{api}/serve/{options.endpoint or manifest.endpoint_name}",
            "openai": f"{api}/v1/embeddings",
            "metrics": f"{api}/metrics",
            "docs": f"{api}/docs",
        }
    if options.stack != "fastapi":
        urls["triton_metrics"] = f"http://127.0.0.1:{options.triton_ports.metrics}/metrics"
        urls["triton_grpc"] = f"127.0.0.1:{options.triton_ports.grpc}"
    if options.stack == "clearml":
        urls["controller_metrics"] = f"http://127.0.0.1:{options.controller_metrics_port}/metrics"
        grpc_port = (
            GatewaySettings.model_fields["grpc_port"].default if options.grpc_port is None else options.grpc_port
        )
        if grpc_port:
            urls["grpc"] = f"127.0.0.1:{grpc_port}"  # the Open Inference Protocol over gRPC (tritonclient.grpc)
    if not options.otlp_endpoint and (receiver := options.tracing_url):
        urls["traces"] = receiver  # the stack's own receiver: `loadtest attack` sends client spans there
    return {
        "stack": options.stack,
        "workers": options.workers,
        "batching": "on" if options.batching else "off",
        "device": options.device,
        "model": {
            "name": manifest.name,
            "version": manifest.version,
            "task": manifest.task,
            "dir": str(options.model_dir.resolve()),
        },
        "urls": urls,
    } | (
        {"sim": {"fixed_us": options.sim_fixed_us, "per_token_us": options.sim_per_token_us}}
        if options.device == "sim"
        else {}
    )


def write_stack_info(options: StackOptions) -> Path:
    """`stack_info` into the run directory, for `serving status` from any shell."""
    path = options.run_dir / STACK_INFO
    return write_private(path, json.dumps(stack_info(options), indent=2) + "\n")

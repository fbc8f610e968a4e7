"""Triton as a process of a stack: the repository rendered for this machine, the stack's knobs, its tracing."""

from __future__ import annotations

import sys
from typing import Any

from services.common.private import private_tree
from services.launcher import ProcessSpec
from services.stacks.options import StackOptions
from services.triton.repository import RenderOptions, render
from services.triton.server import triton_process

TRITON_KNOBS = (
    "max_queue_delay_us",
    "max_queue_size",
    "preferred_batch_sizes",
    "tokenizer_instances",
    "encoder_instances",
    "intra_op_threads",
    "spin",
)
# Behind the gateway, Triton holds no request waiting for others: the gateway's workers already coalesce their
# concurrent requests, and Triton still batches whatever queues while its instance is busy, so batching follows
# the load (docs/decisions/triton-defaults.md).
STACK_TRITON_DEFAULTS: dict[str, dict[str, Any]] = {"clearml": {"max_queue_delay_us": 0}}


def triton_service(
    options: StackOptions, *, models: list[str], render_options: RenderOptions | None = None
) -> ProcessSpec:
    """The real tritonserver loading `models` from a repository rendered for this machine (`local` target, the
    encoder on the stack's device) into the run directory (its owner's alone); with `log_json`, behind
    `services.triton.logpipe`."""
    render_options = render_options or RenderOptions(
        target="local",
        batching=options.batching,
        padding=options.padding,
        device=options.device,
        sim_fixed_us=options.sim_fixed_us,
        sim_per_token_us=options.sim_per_token_us,
        sim_lock_file=str(options.sim_lock_file),
        **triton_knobs(options),
    )
    repository = private_tree(render(options.model_dir, options.run_dir / "triton-repository", render_options))
    spec = triton_process(
        repository, options.run_dir, options.triton_ports, models, extra_args=triton_tracing_args(options)
    )
    if options.log_json:  # Triton's own lines, and its Python stubs', rewritten as JSON
        spec.argv = [sys.executable, "-m", "services.triton.logpipe", "--", *spec.argv]
    return spec


def triton_knobs(options: StackOptions) -> dict:
    """The render options the stack's tuning sets, over the stack's own defaults (`STACK_TRITON_DEFAULTS`)."""
    knobs = {**STACK_TRITON_DEFAULTS.get(options.stack, {}), **options.tuning.given()}
    return {k: v for k, v in knobs.items() if k in TRITON_KNOBS}


def triton_tracing_args(options: StackOptions) -> list[str]:
    """Triton's OpenTelemetry mode: it exports its own spans and joins the caller's W3C `traceparent`.

    Triton traces every request that carries a trace context, whatever its sampled flag, and `rate` of the
    others (1 in N; 0: none). So its callers send a context only with sampled requests (the gateway, the load
    generator), and `rate` applies the stack's ratio to the context-less requests that reach Triton directly
    (STACK=triton); behind a front, Triton traces only what the front sampled."""
    url = options.tracing_url
    if not url:
        return []
    direct = options.stack == "triton"
    rate = round(1 / options.trace_ratio) if direct and options.trace_ratio > 0 else 0
    return [
        "--trace-config=mode=opentelemetry",
        f"--trace-config=rate={rate}",
        "--trace-config=count=-1",
        "--trace-config=level=TIMESTAMPS",
        f"--trace-config=opentelemetry,url={url}",
        "--trace-config=opentelemetry,bsp_schedule_delay=1000",  # export every second (default 5): analyze sooner
        "--trace-config=opentelemetry,resource=service.name=triton",
    ]

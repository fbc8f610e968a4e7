"""Every process a STACK runs, in start order: the trace receiver first when the stack keeps its own spans."""

from __future__ import annotations

import sys

from services.common.errors import ConfigurationError
from services.launcher import ProcessSpec
from services.stacks.clearml import clearml_processes
from services.stacks.http_service import http_service
from services.stacks.options import STACKS, StackOptions
from services.stacks.triton_service import triton_service


def stack_processes(options: StackOptions) -> list[ProcessSpec]:
    """The specs to start one after the other, each once the one before is ready; an unknown stack names the
    choices."""
    if options.stack not in STACKS:
        raise ConfigurationError(f"unknown STACK '{options.stack}'; choose one of {', '.join(STACKS)}")
    receiver = [trace_receiver(options)] if options.traces and not options.otlp_endpoint else []
    if options.stack == "fastapi":
        app = "services.fastapi_stack.app:create_app()"
        return receiver + [http_service(options, name="fastapi", app=app)]
    if options.stack == "triton":
        return receiver + [triton_service(options, models=["tokenizer", "encoder", "ensemble"])]
    return receiver + clearml_processes(options)


def trace_receiver(options: StackOptions) -> ProcessSpec:
    """The stack's own OTLP/HTTP receiver (`services.analysis.receiver`), on loopback."""
    store = (options.run_dir / "traces" / "spans.db").resolve()
    argv = [
        sys.executable,
        "-m",
        "services.analysis.receiver",
        "--store",
        str(store),
        "--port",
        str(options.trace_port),
    ]
    return ProcessSpec(
        name="traces", argv=argv, ports=[options.trace_port], ready_url=f"http://127.0.0.1:{options.trace_port}/health"
    )

"""What each STACK runs: the process specs the launcher starts for `serving up`, and what `serving status` shows.

`options` holds what the user asked for; `processes` puts a stack together from `http_service` (gunicorn),
`triton_service` (tritonserver) and `clearml` (the gateway and the lifecycle controller); `ports` names the option
behind each port; `info` is the stack's description in the run directory.
"""

from __future__ import annotations

from services.launcher.records import read_stack_info
from services.stacks.http_service import http_service
from services.stacks.info import stack_info, write_stack_info
from services.stacks.options import STACKS, StackOptions
from services.stacks.ports import port_claims, unclaimed_ports
from services.stacks.processes import stack_processes, trace_receiver
from services.stacks.triton_service import triton_service, triton_tracing_args
from services.stacks.tuning import Tuning

__all__ = [
    "STACKS",
    "StackOptions",
    "Tuning",
    "http_service",
    "port_claims",
    "read_stack_info",
    "stack_info",
    "stack_processes",
    "trace_receiver",
    "triton_service",
    "triton_tracing_args",
    "unclaimed_ports",
    "write_stack_info",
]

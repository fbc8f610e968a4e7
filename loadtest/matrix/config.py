"""The matrix file (`loadtest/matrices/*.toml`) and the configurations it expands into: which stacks, with which
WORKERS, BATCHING, PADDING, tracing ratio, model variant and tuned settings, how long each phase lasts, and the
latency bound the configurations are ranked at. Every key and its default: docs/load-testing.md, "The matrix file"."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from services.common.devices import DEFAULT_FIXED_US, DEFAULT_PER_TOKEN_US, DEVICES
from services.optimize.graph import VARIANTS


@dataclass(frozen=True)
class RunSpec:
    """One configuration of the matrix: what `running_stack` brings up, and the name its outputs are filed under."""

    stack: str
    workers: int
    batching: bool
    padding: str = "ragged"
    trace_ratio: float = 0.0
    tuning: tuple = ()
    """(setting, value) pairs from `loadtest tune` (a matrix entry's `tuning` table); lists become tuples so the
    spec stays hashable."""
    tracing: str = ""
    """Set when the matrix varies tracing (a `trace` axis): "trace 1%", "no tracing"; part of the name and label."""
    variant: str = ""
    """The model variant served (`int8`: `serving model optimize`'s, read from `variant_dir`); empty: the model
    itself. Part of the name and label."""
    protocol: str = "http"
    """How the load reaches the stack: `http` (its HTTP API) or `grpc` (the gateway's Open Inference Protocol over
    gRPC, STACK=clearml only). Part of the name and label when not http."""

    @property
    def name(self) -> str:
        """`clearml-w2-on`, with `-bucket`, `-trace0.01`, `-tuned`, `-int8`, `-grpc` when those differ from the
        defaults: the file and directory name of the configuration's raw results and traces."""
        suffix = "" if self.padding == "ragged" else f"-{self.padding}"
        if self.tracing:
            suffix += f"-trace{self.trace_ratio:g}"
        if self.tuning:
            suffix += "-tuned"
        if self.variant:
            suffix += f"-{self.variant}"
        if self.protocol != "http":
            suffix += f"-{self.protocol}"
        return f"{self.stack}-w{self.workers}-{'on' if self.batching else 'off'}{suffix}"

    def tuning_settings(self) -> dict:
        """The tuned settings as `running_stack` takes them (tuples back to lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.tuning}


BOUND_MS = {"cpu": 250.0, "sim": 50.0}
"""The default p99 bound of the search, by device: room for a few batches of 16 short sentences in the queue on the
CPU; on the simulated accelerator the servers' own work sets the latency (the batch times behind both:
docs/decisions/measured-defaults.md)."""
TINY_BOUND_MS = 40.0
"""The tiny model's (`serving model tiny`, 2 layers: about a tenth of the real model's cost)."""
TINY_MODELS = ("tiny-bert",)


def default_bound_ms(model: str, device: str = "cpu") -> float:
    """The p99 bound a run ranks at unless its matrix file sets one."""
    return TINY_BOUND_MS if model in TINY_MODELS else BOUND_MS[device]


def _frozen(value):
    return tuple(value) if isinstance(value, list) else value


def settings_text(tuning: tuple) -> str:
    """`max_queue_delay_us=500, encoder_instances=2` (or `defaults`) for the report."""
    items = dict(tuning)
    return ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in items.items()) or "defaults"


@dataclass
class MatrixConfig:
    """A matrix file: its `[[configs]]` entries (each axis a list) and the phases every configuration goes through."""

    configs: list[dict]
    mix: str = "short"
    texts_per_request: int = 1
    concurrency: int = 32
    warmup_seconds: float = 2
    saturation_seconds: float = 8
    load_seconds: float = 5
    load_levels: list[float] = field(default_factory=lambda: [0.25, 0.5, 0.75, 1.0, 1.25])
    ceiling_seconds: float = 10
    rounds: int = 1
    """Interleaved rounds (A B C, A B C, ...): each figure is reported as the median with its min-max; the open-loop
    levels run in the last round."""
    trace_ratio: float = 0.0
    """Share of requests traced end to end; > 0 stores each configuration's traces and adds the stage breakdown and
    the bottleneck verdict to the report."""
    device: str = "cpu"
    """Where every configuration's encoder runs, and the ceiling's: cpu (ONNX Runtime) or sim (the simulated
    accelerator, `services.common.sim_device`, with the two settings below)."""
    sim_fixed_us: float = DEFAULT_FIXED_US
    sim_per_token_us: float = DEFAULT_PER_TOKEN_US
    search: bool = True
    """Search each configuration's highest open-loop rate whose p99 stays under `latency_bound_ms`, in every round:
    the figure the report ranks by (`loadtest.bound_search`)."""
    latency_bound_ms: float | None = None
    """The p99 bound of the search; None: the model's default (`default_bound_ms`)."""
    search_seconds: float = 5
    """Length of each probe of the search (an open-loop attack at one rate)."""
    search_probes: int = 7
    """Probes at most per configuration and round."""
    search_precision: float = 0.05
    """The search ends once the rates that met and missed the bound are this close (relative)."""

    def __post_init__(self):
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, not '{self.device}'")
        if self.latency_bound_ms is not None and self.latency_bound_ms <= 0:
            raise ValueError(f"latency_bound_ms must be > 0, not {self.latency_bound_ms}")
        if self.search_probes < 1 or self.search_seconds <= 0 or self.search_precision <= 0:
            raise ValueError("search_probes must be >= 1, search_seconds and search_precision > 0")

    def bound_ms(self, model: str) -> float:
        """The p99 bound this run ranks at: the file's, else the model's default on this device."""
        return self.latency_bound_ms or default_bound_ms(model, self.device)

    @property
    def device_settings(self) -> dict:
        """What `running_stack` and the ceiling take: the device and its timing."""
        return {"device": self.device, "sim_fixed_us": self.sim_fixed_us, "sim_per_token_us": self.sim_per_token_us}

    @classmethod
    def load(cls, path: Path) -> MatrixConfig:
        return cls(**tomllib.loads(Path(path).read_text()))

    def runs(self) -> list[RunSpec]:
        """Every entry expanded over its axes, in file order (workers, then batching, padding, trace ratio,
        variant, protocol)."""
        return [run for entry in self.configs for run in self._expand(entry)]

    def _expand(self, entry: dict) -> list[RunSpec]:
        tuning = tuple(sorted((k, _frozen(v)) for k, v in entry.get("tuning", {}).items()))
        protocols = [_protocol(entry, p) for p in entry.get("protocol", ["http"])]
        runs = []
        for workers in entry.get("workers", [1]):
            for batching in entry.get("batching", ["on"]):
                for padding in entry.get("padding", ["ragged"]):
                    for ratio in entry.get("trace", [self.trace_ratio]):
                        label = (f"trace {ratio:.0%}" if ratio else "no tracing") if "trace" in entry else ""
                        for variant in entry.get("variant", [""]):
                            for protocol in protocols:
                                runs.append(
                                    RunSpec(
                                        entry["stack"],
                                        int(workers),
                                        batching == "on",
                                        padding,
                                        ratio,
                                        tuning,
                                        label,
                                        _variant(variant),
                                        protocol,
                                    )
                                )
        return runs


def _variant(name: str) -> str:
    """A matrix entry's variant: "" for the model itself (`fp32` or empty), else one `serving model optimize`
    builds."""
    if name in ("", "fp32"):
        return ""
    if name not in VARIANTS:
        raise ValueError(f"variant must be fp32 or one of {', '.join(VARIANTS)}, not '{name}'")
    return name


PROTOCOLS = ("http", "grpc")
GRPC_STACKS = ("clearml",)
"""The stacks that serve the Open Inference Protocol over gRPC: the gateway."""


def _protocol(entry: dict, name: str) -> str:
    """A matrix entry's protocol, checked against its stack."""
    if name not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, not '{name}'")
    if name == "grpc" and entry["stack"] not in GRPC_STACKS:
        raise ValueError(
            f'protocol = ["grpc"] is for stack {" or ".join(GRPC_STACKS)} only (its gateway serves the Open '
            f"Inference Protocol over gRPC), not stack '{entry['stack']}': remove the key from that entry"
        )
    return name


def variant_dir(model_dir: Path, variant: str) -> Path:
    """Where a variant of MODEL_DIR is built (`make variant VARIANT=int8`: build/model -> build/model-int8); the model
    itself for the empty variant."""
    return model_dir.with_name(f"{model_dir.name}-{variant}") if variant else model_dir

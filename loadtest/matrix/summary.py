"""A run's figures brought together: each configuration's saturation (or the rate its search found under the
latency bound) over its rounds as medians with the throughput's min-max, and the raw ONNX Runtime references measured
around the rounds as one ceiling."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from loadtest.ceiling import model_cpu_at
from loadtest.matrix.measure import Measurement


@dataclass
class Summary:
    """A configuration's saturation over its rounds: medians, and the throughput's min-max."""

    label: str
    stack: str
    workers: int
    batching: bool
    rounds: int
    throughput: float
    low: float
    high: float
    p50_ms: float
    p99_ms: float
    success: float
    """The worst round's."""
    cpu_us_per_request: float | None
    front_cpu_us_per_request: float | None
    settings: str = "defaults"
    batch_size: float | None = None
    model_cpu_us_per_sequence: float | None = None
    goodput: float | None = None
    """Bound rows: answers within the bound per second at the rate found."""
    variant: str = ""
    """The model variant served; empty: the model itself."""
    protocol: str = "http"
    """How the load reached the stack: http or grpc."""

    @property
    def spread(self) -> float:
        """The throughput's min-max over its median."""
        return (self.high - self.low) / self.throughput if self.throughput else 0.0


def _median(values):
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def aggregate(saturated: list[Measurement]) -> list[Summary]:
    """One Summary per label, in the order the labels first appear (rows of one kind: saturation, or bound)."""
    groups: dict[str, list[Measurement]] = {}
    for m in saturated:
        groups.setdefault(m.label, []).append(m)
    return [_summary(label, items) for label, items in groups.items()]


def _summary(label: str, items: list[Measurement]) -> Summary:
    rates = [m.throughput for m in items]
    first = items[0]
    return Summary(
        label,
        first.stack,
        first.workers,
        first.batching,
        len(items),
        _median(rates),
        min(rates),
        max(rates),
        _median([m.p50_ms for m in items]),
        _median([m.p99_ms for m in items]),
        min(m.success for m in items),
        _median([m.cpu_us_per_request for m in items]),
        _median([m.front_cpu_us_per_request for m in items]),
        first.settings,
        _median([m.batch_size for m in items]),
        _median([m.model_cpu_us_per_sequence for m in items]),
        _median([m.goodput for m in items]),
        first.variant,
        first.protocol,
    )


def model_cpu(m: Summary, ceiling: dict) -> float | None:
    """The model's CPU per sequence at the batch the stack formed: its own round's, else the run's averaged
    reference; None where unknown, and for a variant's rows (the references ran the model itself)."""
    if m.batch_size is None or m.variant:
        return None
    return m.model_cpu_us_per_sequence or model_cpu_at(ceiling.get("cpu_us_per_sequence", {}), m.batch_size)


def efficiency(m: Summary, ceiling: dict) -> float | None:
    """`model_cpu` over the stack's CPU per request (1.0: a server that costs nothing beyond the model)."""
    model = model_cpu(m, ceiling)
    return model / m.cpu_us_per_request if model is not None and m.cpu_us_per_request else None


def reference_summary(references: list[dict]) -> dict:
    """The raw ONNX Runtime references of a run as one: rates and CPU per sequence averaged, first and last kept
    (the report shows the drift between them)."""
    batches = references[0]["cpu_us_per_sequence"]
    return {
        **references[0],
        "rate": sum(r["rate"] for r in references) / len(references),
        "start": references[0]["rate"],
        "end": references[-1]["rate"],
        "cpu_us_per_sequence": {
            b: sum(r["cpu_us_per_sequence"][b] for r in references) / len(references) for b in batches
        },
    }


def attach_model_cpu(measurements: list[Measurement], references: list[dict], rounds: int) -> None:
    """Give each saturation with a batch size the model's own CPU per sequence at that batch, from the references
    just before and just after its round (references[r - 1] and references[r]; a single reference when the run had
    one round): each round is judged against its own machine. A variant's rows get none: the references ran the model
    itself."""
    per_round = {r: reference_summary(references[r - 1 : r + 1])["cpu_us_per_sequence"] for r in range(1, rounds + 1)}
    for m in measurements:
        if m.kind == "saturation" and m.batch_size and not m.variant:
            m.model_cpu_us_per_sequence = model_cpu_at(per_round[m.round], m.batch_size)

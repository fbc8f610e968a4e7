"""The knobs past a stack's defaults that `serving up` and the benchmarks may set (`loadtest tune` searches most of
them): Triton's batching and instances, ONNX Runtime's threads, the gateway's coalescing depth."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Tuning:
    """Each knob None where the stack's default applies."""

    max_queue_delay_us: int | None = None
    """Triton's dynamic batcher: microseconds a request may wait for others."""
    max_queue_size: int | None = None
    """Triton's dynamic batcher: requests queued at most (more get 503)."""
    preferred_batch_sizes: tuple[int, ...] | None = None
    """Triton's dynamic batcher: batch sizes it prefers to form."""
    tokenizer_instances: int | None = None
    """Instances of the Triton ensemble's Python tokenizer."""
    encoder_instances: int | None = None
    """Instances of Triton's encoder model."""
    intra_op_threads: int | None = None
    """ONNX Runtime threads: Triton's encoder, or each FastAPI worker."""
    spin: bool | None = None
    """ONNX Runtime's threads spin between runs (Triton's encoder)."""
    coalesce_depth: int | None = None
    """Coalesced batches in flight per gateway worker (`SERVING_COALESCE_DEPTH`)."""

    @classmethod
    def of(cls, knobs: Mapping[str, Any] | None) -> Tuning:
        """The knobs named in `knobs` (lists as tuples); ValueError naming an unknown one and the known ones."""
        known = {f.name for f in fields(cls)}
        if unknown := sorted(set(knobs or {}) - known):
            raise ValueError(f"unknown tuning knob {unknown[0]!r}; known: {', '.join(sorted(known))}")
        given: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in (knobs or {}).items()}
        return cls(**given)

    def given(self) -> dict[str, Any]:
        """The knobs set, by name."""
        return {k: v for k, v in asdict(self).items() if v is not None}

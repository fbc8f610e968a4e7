"""Stretches of one request's time and their exact partition into named stages.

Spans from different hops do not nest as neatly as a tree suggests: Triton ends its `compute` span when the model
has released its output, after the response has already gone back to the caller (so a model's compute output can
outlive its InferRequest, the gateway's `triton` stage and even the client's span); siblings can overlap. Summing
span durations then counts those stretches twice: shares add up to more than 100% and a waterfall runs past its
total (docs/decisions/measured-defaults.md). Here every instant of the request's end-to-end time belongs to
exactly one stage: each segment is clipped to its parent's (clipped) stretch, a sibling that starts while an earlier
one runs gets only the time after it, and a parent's own label gets whatever none of its children covers. The stages
of a request therefore add up to its end-to-end time exactly; what was clipped off is reported, not dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MS = 1e-6


@dataclass
class Segment:
    label: str
    """The stage that gets this stretch's time not covered by its children."""
    start_ns: int
    end_ns: int
    children: list[Segment] = field(default_factory=list)


def partition(root: Segment) -> tuple[dict[str, float], dict[str, float]]:
    """The root's time split into stages (ms, in the order of the request's path: by the first instant each stage
    got), and the time segments spent outside their parent's span, split the same way (ms, counted in no stage)."""
    stages, clipped = _Tally(), _Tally()
    _fill(root, root.start_ns, max(root.start_ns, root.end_ns), stages, clipped)
    return stages.ordered(), {k: v for k, v in clipped.ordered().items() if v > 0}


class _Tally:
    """Milliseconds per stage, and when each stage first got any (the order of the request's path)."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self.first: dict[str, int] = {}

    def add(self, label: str, start: int, end: int) -> None:
        self.ms[label] = self.ms.get(label, 0.0) + max(0, end - start) * MS
        if end > start or label not in self.first:
            self.first[label] = min(self.first.get(label, start), start)

    def ordered(self) -> dict[str, float]:
        return {label: self.ms[label] for label in sorted(self.ms, key=self.first.__getitem__)}


def _fill(segment: Segment, start: int, end: int, stages: _Tally, clipped: _Tally) -> None:
    """Give [start, end) (the part of `segment` inside its parent, after earlier siblings) to `segment`'s stages."""
    cursor = start
    for child in sorted(segment.children, key=lambda c: c.start_ns):
        outside = (
            (child.start_ns, min(child.end_ns, segment.start_ns)),
            (max(child.start_ns, segment.end_ns), child.end_ns),
        )
        for low, high in outside:  # outside the parent's span: shared among the child's stages alike, set aside
            if high > low:  # (what lies inside the parent's span but outside its stretch, its own parent set aside)
                _fill(child, low, high, clipped, _Tally())
        child_start, child_end = max(child.start_ns, cursor), min(child.end_ns, end)
        if child_end <= child_start:
            continue  # wholly outside its parent, or wholly inside an earlier sibling: counted once already
        stages.add(segment.label, cursor, child_start)  # the parent's own time before this child
        _fill(child, child_start, child_end, stages, clipped)
        cursor = child_end
    stages.add(segment.label, cursor, end)

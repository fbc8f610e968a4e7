"""HEAD against BASE from paired rounds: each round's HEAD/BASE ratio, their median and range, and the verdict.

A round runs both trees back to back, so a drift of the machine that lasts longer than one pair cancels in that
round's ratio; what the ratios still spread over the rounds is the noise left. A change is called only when every
round agrees on its direction and the median's distance from 1 exceeds both that spread and `min_change`:

- slower (throughput) / more CPU: at least 2 rounds, every ratio on the worse side of 1, and
  |median - 1| > max(max ratio - min ratio, min_change) (which already implies the side: a drop larger than the
  range leaves no ratio at or past 1);
- faster / less CPU: the same on the better side;
- otherwise no change (with 1 round: no verdict).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MIN_CHANGE = 0.03
"""Changes smaller than this share are not called, however steady the rounds."""


@dataclass(frozen=True)
class Comparison:
    """One figure of one configuration, HEAD against BASE over the rounds."""

    base: list[float | None]
    head: list[float | None]
    """The figure of each round, in round order (the pairs line up); None where a round lacks it."""
    higher_is_better: bool = True

    @property
    def ratios(self) -> list[float]:
        """HEAD/BASE of each round whose pair has both figures (a missing or zero BASE figure drops the pair)."""
        return [h / b for b, h in zip(self.base, self.head, strict=True) if b and h is not None]

    @property
    def median(self) -> float | None:
        return statistics.median(self.ratios) if self.ratios else None

    @property
    def low(self) -> float | None:
        return min(self.ratios, default=None)

    @property
    def high(self) -> float | None:
        return max(self.ratios, default=None)

    def verdict(self, min_change: float = MIN_CHANGE) -> str:
        """`slower` | `faster` for a throughput, `more CPU` | `less CPU` for a cost, `no change`, or `no verdict`
        with fewer than 2 paired rounds (the module's docstring gives the rule)."""
        ratios = self.ratios
        if len(ratios) < 2:
            return "no verdict"
        low, high, median = min(ratios), max(ratios), statistics.median(ratios)
        bar = max(high - low, min_change)
        worse, better = ("slower", "faster") if self.higher_is_better else ("more CPU", "less CPU")
        if high < 1 and 1 - median > bar:
            return worse if self.higher_is_better else better
        if low > 1 and median - 1 > bar:
            return better if self.higher_is_better else worse
        return "no change"


def median_of(values: Sequence[float | None]) -> float | None:
    """The median of the figures present; None when none is."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def ratio_text(comparison: Comparison) -> str:
    """`0.987 (0.951-1.012)`, or `-` without a paired round."""
    if comparison.median is None:
        return "-"
    return f"{comparison.median:.3f} ({comparison.low:.3f}-{comparison.high:.3f})"

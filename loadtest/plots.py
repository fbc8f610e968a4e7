"""Charts for the benchmark report: the original study's throughput bar chart with the raw ONNX Runtime ceiling,
and latency percentiles versus offered load (hockey-stick curves)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

if TYPE_CHECKING:
    from loadtest.matrix.measure import Measurement
    from loadtest.matrix.summary import Summary

COLORS = {"fastapi": "#4C72B0", "triton": "#DD8452", "clearml": "#55A868", "minimal": "#8172B3"}
OTHER = "#999999"


def throughput_chart(
    saturated: Sequence[Summary],
    ceiling: float,
    path: Path,
    ceiling_label: str = "raw ONNX Runtime ceiling",
    ylabel: str = "saturated throughput (requests/s)",
) -> None:
    """The rate of every configuration (saturated, or found under a latency bound: `ylabel` says which), with the
    ceiling as a line; a ceiling over three times the tallest bar (the simulated device's) is named in the title
    instead, so the bars stay readable."""
    rows = sorted(saturated, key=lambda m: (m.stack, m.workers, m.batching, m.settings))
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows) + 2), 4.5))
    bars = ax.bar(
        [m.label for m in rows], [m.throughput for m in rows], color=[COLORS.get(m.stack, OTHER) for m in rows]
    )
    ax.bar_label(bars, fmt="%.0f", padding=2)
    tallest = max([m.throughput for m in rows], default=0)
    title = "Throughput per configuration"
    if ceiling <= 3 * tallest:
        ax.axhline(ceiling, color="black", linestyle="--", linewidth=1)
        ax.text(-0.4, ceiling, f"{ceiling_label} {ceiling:.0f}/s", ha="left", va="bottom")
        tallest = max(tallest, ceiling)
    else:
        title += f" ({ceiling_label}: {ceiling:.0f}/s, off the chart)"
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, tallest * 1.15)
    ax.set_title(title, fontsize=10)
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def latency_chart(load: Sequence[Measurement], path: Path) -> None:
    labels = sorted({m.label for m in load})
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharex=False)
    for label in labels:
        points = sorted((m for m in load if m.label == label), key=lambda m: m.offered_rate or 0.0)
        stack = points[0].stack
        style = "-" if points[0].batching or stack == "fastapi" else ":"
        for ax, attr in zip(axes, ("p50_ms", "p99_ms"), strict=True):
            ax.plot(
                [m.offered_rate for m in points],
                [getattr(m, attr) for m in points],
                style,
                marker="o",
                color=COLORS.get(stack, OTHER),
                alpha=0.6 + 0.1 * min(points[0].workers, 4),
                label=label,
            )
    for ax, name in zip(axes, ("median", "99th percentile"), strict=True):
        ax.set_yscale("log")
        ax.set_xlabel("offered load (requests/s)")
        ax.set_ylabel(f"{name} latency (ms)")
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.suptitle("Latency versus offered load")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def timeline_chart(rows: list[dict], title: str, path: Path) -> None:
    """Over time: answers per second by kind, the admitted requests' latency, and the stack's resident memory."""
    t = [row["t"] for row in rows]
    fig, axes = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    axes[0].plot(t, [row["ok_per_s"] for row in rows], color="#55A868", label="2xx/s")
    axes[0].plot(t, [row["shed_per_s"] for row in rows], color="#DD8452", label="shed (429/503)/s")
    axes[0].plot(t, [row["errors_per_s"] for row in rows], color="#C44E52", label="other errors/s")
    axes[0].set_ylabel("answers per second")
    axes[0].legend(fontsize=8)
    axes[1].plot(t, [row["p50_ms"] for row in rows], label="p50")
    axes[1].plot(t, [row["p99_ms"] for row in rows], label="p99")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("admitted latency (ms)")
    axes[1].legend(fontsize=8)
    axes[2].plot(t, [row["rss_mb"] for row in rows], color="black")
    axes[2].set_ylabel("stack resident memory (MB)")
    axes[2].set_xlabel("seconds since the attack started")
    for ax in axes:
        ax.grid(True, alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

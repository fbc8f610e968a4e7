"""Charts for the benchmark report: the original study's throughput bar chart with the raw ONNX Runtime ceiling,
and latency percentiles versus offered load (hockey-stick curves)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"fastapi": "#4C72B0", "triton": "#DD8452", "clearml": "#55A868"}


def throughput_chart(saturated, ceiling: float, path: Path) -> None:
    rows = sorted(saturated, key=lambda m: (m.stack, m.workers, m.batching))
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows) + 2), 4.5))
    bars = ax.bar([m.label for m in rows], [m.throughput for m in rows], color=[COLORS.get(m.stack) for m in rows])
    ax.bar_label(bars, fmt="%.0f", padding=2)
    ax.axhline(ceiling, color="black", linestyle="--", linewidth=1)
    ax.text(-0.4, ceiling, f"raw ONNX Runtime ceiling {ceiling:.0f}/s", ha="left", va="bottom")
    ax.set_ylabel("saturated throughput (requests/s)")
    ax.set_ylim(0, max([ceiling] + [m.throughput for m in rows]) * 1.15)
    ax.set_title("Throughput per configuration")
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def latency_chart(load, path: Path) -> None:
    labels = sorted({m.label for m in load})
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharex=False)
    for label in labels:
        points = sorted((m for m in load if m.label == label), key=lambda m: m.offered_rate)
        stack = points[0].stack
        style = "-" if points[0].batching or stack == "fastapi" else ":"
        for ax, attr in zip(axes, ("p50_ms", "p99_ms"), strict=True):
            ax.plot(
                [m.offered_rate for m in points],
                [getattr(m, attr) for m in points],
                style,
                marker="o",
                color=COLORS.get(stack),
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

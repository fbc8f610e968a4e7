"""The analysis as people read it: a printed table, a markdown report, a stacked-bar chart of stage shares per load
level and a waterfall of a typical and of a p99 trace."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from services.analysis.decompose import Decomposition  # noqa: E402
from services.analysis.verdict import Analysis, Level  # noqa: E402


def stage_table(level: Level) -> list[str]:
    lines = [
        f"**{level.name}**: {level.traces} traces; end to end p50 {level.total_p50_ms:.1f} ms, p90 "
        f"{level.total_p90_ms:.1f} ms, p99 {level.total_p99_ms:.1f} ms; most time goes to **{level.dominant_stage}**; "
        f"the slowest 1% are dominated by **{level.slowest_stage}** ({level.slowest_share:.0%} of their time).",
        "",
    ]
    if level.failed:
        kinds = ", ".join(f"{outcome}: {n}" for outcome, n in level.failed.items())
        count = sum(level.failed.values())
        lines += [f"**Not in the table**: {count} traced requests that failed or lack server spans ({kinds}).", ""]
    lines += [
        "| stage | in traces | p50 ms | p90 ms | p99 ms | share of mean |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in level.stages:
        lines.append(f"| {s.name} | {s.seen:.0%} | {s.p50_ms:.2f} | {s.p90_ms:.2f} | {s.p99_ms:.2f} | {s.share:.1%} |")
    lines += [
        "",
        "p50/p90/p99: over the traces the stage took time in; share of mean: of the mean end-to-end time, over all.",
    ]
    return lines


def markdown(analysis: Analysis, title: str = "Bottleneck analysis") -> str:
    lines = [f"# {title}", "", f"**Verdict:** {analysis.verdict}", "", f"**Knob:** {analysis.advice}", ""]
    if analysis.growing_stage:
        lines += [
            f"Across load levels, **{analysis.growing_stage}** grew most (+{analysis.growth_ms:.1f} ms mean from the "
            "lowest to the highest level): the saturating resource.",
            "",
        ]
    lines += [f"- {note}" for note in analysis.notes] + ([""] if analysis.notes else [])
    for level in analysis.levels:
        lines += stage_table(level) + [""]
    lines += ["![stage shares](stages.png)", "", "![waterfalls](waterfall.png)", ""]
    return "\n".join(lines)


def shares_chart(analysis: Analysis, path: Path) -> None:
    levels = analysis.levels
    names = list(dict.fromkeys(s.name for lv in levels for s in lv.stages))
    colors = plt.get_cmap("tab20")(range(len(names)))
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(levels) + 4), 5))
    bottoms = [0.0] * len(levels)
    for name, color in zip(names, colors, strict=True):
        values = [next((s.share for s in lv.stages if s.name == name), 0.0) * 100 for lv in levels]
        ax.bar([lv.name for lv in levels], values, bottom=bottoms, color=color, label=name)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    ax.set_ylabel("share of mean end-to-end latency (%)")
    ax.set_title("Where the time goes, per load level")
    ax.legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def waterfall_chart(typical: Decomposition, slow: Decomposition, path: Path) -> None:
    fig, axes = plt.subplots(2, 1, figsize=(10, 7))
    for ax, trace, label in zip(axes, (typical, slow), ("typical (p50) trace", "p99 trace"), strict=True):
        start = 0.0
        names = list(trace.stages)
        for row, name in enumerate(names):
            width = trace.stages[name]
            ax.barh(row, width, left=start, color="#4C72B0" if width < 0.3 * trace.total_ms else "#C44E52")
            ax.text(start + width, row, f" {width:.2f} ms", va="center", fontsize=7)
            start += width
        ax.set_yticks(range(len(names)), names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("ms from the request's start (stages along its path)")
        ax.set_title(f"{label}: {trace.total_ms:.1f} ms, trace {trace.trace_id}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(analysis: Analysis, out: Path, title: str = "Bottleneck analysis") -> Path:
    out.mkdir(parents=True, exist_ok=True)
    top = analysis.top
    shares_chart(analysis, out / "stages.png")
    waterfall_chart(top.typical_trace, top.p99_trace, out / "waterfall.png")
    (out / "analysis.md").write_text(markdown(analysis, title))
    return out / "analysis.md"

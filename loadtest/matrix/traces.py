"""A traced configuration's spans: kept beside the run's results, analysed (where the time goes, the bottleneck
verdict, with their own report and charts), and summarised for the run's report.md."""

from __future__ import annotations

import shutil
from pathlib import Path


def analyze_config(store_path: Path, out: Path) -> dict:
    """Copy the stack's span store to OUT/spans.db, write the analysis there, return its summary for report.md
    (or `{"error": ...}` when the spans could not be analysed)."""
    from services.analysis import report
    from services.analysis.decompose import decompose_all
    from services.analysis.settle import settle
    from services.analysis.store import SpanStore
    from services.analysis.verdict import analyze

    out.mkdir(parents=True, exist_ok=True)
    store = SpanStore(store_path)
    settle(store)  # the services' last spans, exported every 5 s (Triton's every second)
    spans = store.spans()
    store.close()
    shutil.copy(store_path, out / "spans.db")
    try:
        analysis = analyze(decompose_all(spans))
    except ValueError as error:
        return {"error": str(error)}
    report.write(analysis, out, f"Bottleneck analysis: {out.name}")
    top = analysis.top
    stages = sorted(top.stages, key=lambda s: -s.share)[:4]
    return {
        "verdict": analysis.verdict,
        "advice": analysis.advice,
        "level": top.name,
        "traces": sum(lv.traces for lv in analysis.levels),
        "top_stages": [{"stage": s.name, "share": s.share, "p99_ms": s.p99_ms} for s in stages],
    }


def analysis_section(analyses: dict) -> list[str]:
    """The report's "Why" section: per traced configuration, its top stages, verdict and advice, linked to its
    analysis."""
    lines = ["## Why: where the time goes (tracing-based analysis)", ""]
    for name, found in analyses.items():
        if "error" in found:
            lines += [f"- **{name}**: {found['error']}", ""]
            continue
        shares = ", ".join(f"{s['stage']} {s['share']:.0%}" for s in found["top_stages"])
        lines += [
            f"**{name}** ({found['traces']} traces; at {found['level']}: {shares}). Verdict: {found['verdict']}. "
            f"Knob: {found['advice']}. [analysis](traces/{name}/analysis.md)",
            "",
        ]
    return lines

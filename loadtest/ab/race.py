"""`loadtest ab` from start to end: both trees ready (BASE's worktree and environment), each tree's models built by
its own builder, the interleaved steps, the report into <out>/<timestamp>/."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path

from loadtest.ab.models import build_models
from loadtest.ab.plan import BASE, HEAD
from loadtest.ab.report import write_report
from loadtest.ab.run import AbSettings, run_steps
from loadtest.ab.trees import base_tree, default_base, head_tree, resolve_commit


def race(
    base_revision: str | None,
    settings: AbSettings,
    work_dir: Path,
    out_root: Path,
    *,
    base_env: str = "auto",
    tiny_checkpoint: Path | None = None,
    log: Callable[[str], None] = print,
) -> tuple[Path, list[dict], str]:
    """Race BASE (a revision; None: `default_base`) against this checkout; returns the run's directory, its
    records and report.md's text."""
    head = head_tree()
    commit = resolve_commit(head.root, base_revision) if base_revision else default_base(head)
    log(f"[ab] HEAD {head.label} ({head.root}) against BASE {commit[:12]}" + ("" if base_revision else " (default)"))
    base = base_tree(head, commit, work_dir, base_env, log)
    env_text = "HEAD's environment, PYTHONPATH=its worktree" if base.pythonpath else "its own environment"
    log(f"[ab] BASE checked out in {base.root}, serving with {env_text}; building each tree's models")
    built = build_models(head, base, settings.models, work_dir, tiny_checkpoint)
    for model in built:
        log(f"[ab] {model.tree} {model.model} model: {model.how} ({model.path})")
    out = out_root / dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True)
    meta = {
        "head": head.label,
        "head_root": str(head.root),
        "base": base.label,
        "base_root": str(base.root),
        "base_env": env_text,
        "models": [f"{m.tree} {m.model} {m.how}" for m in built],
        "cpus": os.cpu_count(),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        **{k: getattr(settings, k) for k in ("rounds", "concurrency", "mix", "warmup_seconds", "duration")},
    }
    models = {(m.tree, m.model): m.path for m in built}
    records = run_steps({HEAD: head, BASE: base}, models, settings, out, log)
    return out, records, write_report(out, meta, records, settings.min_change)

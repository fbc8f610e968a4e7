"""Each panel of a dashboard drawn into a PNG from its queries' range results, and one HTML page showing them all.

A panel whose queries return no series says "no data" in its image, and one whose query Prometheus refused says why:
the other panels are drawn all the same. Text from Prometheus (label values, its error messages) is drawn as it is,
never read as matplotlib's mathtext (`$...$`, which fails to draw on text such as `$x^$`)."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

from services.common.errors import ServingError  # noqa: E402
from services.dashboards.queries import Dashboard, Panel, legend  # noqa: E402

Series = tuple[dict[str, str], list[tuple[float, float]]]
Fetch = Callable[[str], list[Series]]
"""A concrete PromQL expression -> its range result (`PrometheusApi.query_range` over the chosen range)."""
UNITS = {"s": ("ms", 1000.0), "reqps": ("req/s", 1.0), "percentunit": ("%", 100.0), "none": ("", 1.0)}
"""Grafana's unit -> the axis label and the factor its values are drawn with."""
MAX_SERIES = 12
"""Lines drawn per panel at most (the legend stays readable); the page says how many were left out."""


@dataclass(frozen=True)
class Drawn:
    dashboard: str
    title: str
    image: Path
    status: str
    """"data" (N series), "no data", or "query failed: why"."""
    queries: list[str]


def draw_panel(
    panel: Panel, queries: list[str], fetch: Fetch, path: Path, dashboard: str, down: Sequence[str] = ()
) -> Drawn:
    """One panel's image at `path` from `fetch` of each of its `queries` (concrete PromQL); with no data, its status
    names the scrape targets that are `down` (why a panel is empty, most often)."""
    label, factor = UNITS.get(panel.unit, (panel.unit, 1.0))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    drawn, problems, left_out = 0, [], 0
    for target, expr in zip(panel.targets, queries, strict=True):
        try:
            result = fetch(expr)
        except ServingError as error:
            problems.append(error.message)
            continue
        for labels, points in result:
            finite = [(t, v * factor) for t, v in points if math.isfinite(v)]
            if not finite:
                continue
            if drawn >= MAX_SERIES:
                left_out += 1
                continue
            times = [datetime.fromtimestamp(t, UTC) for t, _ in finite]
            values, name = [v for _, v in finite], shown(legend(target.legend, labels)[:60])
            # datetimes go through matplotlib's date converter (its date locator and ticks); its stubs take numbers
            ax.plot(times, values, label=name, linewidth=1.2)  # type: ignore[arg-type]
            drawn += 1
    ax.set_title(panel.title, fontsize=10, parse_math=False)
    ax.set_ylabel(label, parse_math=False)
    ax.set_xlabel("UTC", fontsize=8)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=UTC))
    ax.grid(alpha=0.3)
    if drawn:
        for text in ax.legend(fontsize=7, loc="upper left").get_texts():
            text.set_parse_math(False)
        status = f"data ({drawn} series" + (f", {left_out} more not drawn)" if left_out else ")")
    else:
        status = f"query failed: {problems[0]}" if problems else no_data(down)
        ax.text(
            0.5,
            0.5,
            wrapped(status),
            ha="center",
            va="center",
            transform=ax.transAxes,
            fontsize=9,
            color="0.4",
            parse_math=False,
        )
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return Drawn(dashboard, panel.title, path, status, queries)


FEEDS = {"serving": ("serving",), "models": ("serving", "controller"), "triton": ("triton",), "loadtest": ("loadtest",)}
"""The scrape jobs whose series each shipped dashboard draws (`observability/prometheus/prometheus.yml`'s jobs); a
dashboard not named here is fed by any."""


def feeding(dashboard: str, down: Sequence[str]) -> list[str]:
    """The down targets ("job address") among the jobs that feed `dashboard`: a panel's emptiness is blamed on them
    only."""
    jobs = FEEDS.get(dashboard)
    return [target for target in down if jobs is None or target.split(" ", 1)[0] in jobs]


def no_data(down: Sequence[str]) -> str:
    """The status of a panel with no data: it names the scrape targets that are down."""
    return "no data; scrape targets down: " + ", ".join(down) if down else "no data"


def shown(label: str) -> str:
    """A series' legend entry as matplotlib keeps it: one starting with `_` would be left out of the legend."""
    return " " + label if label.startswith("_") else label


def wrapped(text: str, width: int = 70) -> str:
    return "\n".join(text[i : i + width] for i in range(0, min(len(text), 4 * width), width))


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:50] or "panel"


def draw_dashboard(
    dashboard: Dashboard, queries: list[list[str]], fetch: Fetch, out: Path, down: Sequence[str] = ()
) -> list[Drawn]:
    """Every panel of `dashboard` into `out/<dashboard>/NN-<title>.png`; `down`: the scrape targets that are down (an
    empty panel names those of the jobs that feed the dashboard)."""
    folder = out / dashboard.name
    folder.mkdir(parents=True, exist_ok=True)
    return [
        draw_panel(
            panel,
            panel_queries,
            fetch,
            folder / f"{index + 1:02d}-{slug(panel.title)}.png",
            dashboard.name,
            feeding(dashboard.name, down),
        )
        for index, (panel, panel_queries) in enumerate(zip(dashboard.panels, queries, strict=True))
    ]


def page(dashboards: list[Dashboard], drawn: list[Drawn], out: Path, heading: str) -> Path:
    """`out/index.html`: per dashboard, its panels' images (with each panel's status and queries)."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Dashboards</title><style>"
        "body{font-family:sans-serif;margin:1em 2em}figure{display:inline-block;margin:0 1em 1em 0;vertical-align:top}"
        "figcaption{font-size:12px;color:#555;max-width:630px}code{font-size:11px;word-break:break-all}</style>"
        f"</head><body><h1>Dashboards</h1><p>{html.escape(heading)}</p>"
    ]
    for dashboard in dashboards:
        parts.append(f"<h2 id='{html.escape(dashboard.name)}'>{html.escape(dashboard.title)}</h2>")
        for item in (d for d in drawn if d.dashboard == dashboard.name):
            source = html.escape(item.image.relative_to(out).as_posix())
            queries = "".join(f"<br><code>{html.escape(q)}</code>" for q in item.queries)
            parts.append(
                f"<figure><a href='{source}'><img src='{source}' alt='{html.escape(item.title)}'></a>"
                f"<figcaption>{html.escape(item.status)}{queries}</figcaption></figure>"
            )
    parts.append("</body></html>\n")
    path = out / "index.html"
    path.write_text("".join(parts))
    return path

"""The models dashboard, per endpoint and version: traffic split (a canary's share), latency, errors, built-in input
and output statistics (services.monitoring.builtin), declared custom statistics and drift scores."""

from __future__ import annotations

from observability.dashboards.panels import dashboard, panel, quantile, summed, variable

ENDPOINT = 'endpoint=~"$endpoint"'
BY = "endpoint, version"
VERSION = "{{endpoint}} v{{version}}"
QUANTILES = (("0.50", "p50"), ("0.99", "p99"))


def per_version(metric: str, by: str = BY) -> str:
    return summed(by, metric, ENDPOINT)


def median_and_p99(histogram: str, legend: str = VERSION) -> list[tuple[str, str]]:
    return [(quantile(q, BY, histogram, ENDPOINT), f"{name} {legend}") for q, name in QUANTILES]


def traffic() -> list[dict]:
    """Which version answers how much of an endpoint's traffic, how fast and with which status codes."""
    requests = "serving_endpoint_requests_total"
    return [
        panel(
            "Traffic share by version",
            [(f"{per_version(requests)} / ignoring(version) group_left {per_version(requests, 'endpoint')}", VERSION)],
            "percentunit",
        ),
        panel("Latency by version (p50, p99)", median_and_p99("serving_endpoint_latency_seconds"), "s"),
        panel("Requests by version and code", [(per_version(requests, f"{BY}, code"), VERSION + " {{code}}")], "reqps"),
    ]


def statistics() -> list[dict]:
    """What goes in and comes out: the built-in statistics, the declared custom ones and the drift scores."""
    texts = f"{per_version('serving_endpoint_truncated_texts_total')} / {per_version('serving_endpoint_texts_total')}"
    # Declared statistics carry their endpoint in the metric's name (serving_custom_<endpoint>_<variable>), not a label,
    # and rate() drops the name: it is copied into a label first (a subquery), so that two variables of one version
    # stay two series, each summed over every worker and pod.
    counts, variable = (
        '{__name__=~"serving_custom_.+_count"}',
        '"variable", "${1}", "__name__", "serving_custom_(.+)_count"',
    )
    named = f"label_replace({counts}, {variable})"
    custom = f"sum by (variable, version) (rate({named}[$__rate_interval:]))"
    drift = f"max by ({BY}, feature, method) (serving_drift_score{{{ENDPOINT}}})"
    return [
        panel(
            "Token length per text (p50, p99) and truncation rate",
            median_and_p99("serving_endpoint_token_length", f"tokens {VERSION}") + [(texts, f"truncated {VERSION}")],
            "none",
        ),
        panel(
            "Embedding norm (p50) and classifier top score (p50)",
            [
                (quantile("0.50", BY, "serving_endpoint_embedding_norm", ENDPOINT), f"norm {VERSION}"),
                (quantile("0.50", BY, "serving_endpoint_top_score", ENDPOINT), f"top score {VERSION}"),
            ],
            "none",
        ),
        panel(
            "Predicted labels",
            [(per_version("serving_endpoint_predicted_label_total", f"{BY}, label"), VERSION + " {{label}}")],
            "reqps",
        ),
        panel("Declared custom statistics (observations per second)", [(custom, "{{variable}} v{{version}}")], "none"),
        panel(
            "Drift scores (PSI alert threshold 0.25)",
            [(drift, "{{method}} {{feature}} " + VERSION)],
            "none",
        ),
    ]


def models() -> dict:
    return dashboard(
        "models",
        "Models: versions, traffic split, statistics, drift",
        traffic() + statistics(),
        [variable("endpoint", "label_values(serving_endpoint_requests_total, endpoint)")],
    )

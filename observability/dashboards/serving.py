"""The serving API's dashboard (FastAPI stack and gateway, scraped as the `serving` job): per-stage and per-route
latency, requests by route and status code, requests in flight."""

from __future__ import annotations

from observability.dashboards.panels import dashboard, panel, quantile, summed, variable

JOB = 'job=~"$job"'


def serving() -> dict:
    stages = "serving_stage_duration_seconds"
    return dashboard(
        "serving",
        "Serving API (FastAPI stack / gateway)",
        [
            panel(
                "Per-stage latency p99 (parse, preprocess, triton|inference, postprocess)",
                [
                    (quantile("0.99", "stage", stages, JOB), "p99 {{stage}}"),
                    (quantile("0.50", "stage", stages, JOB), "p50 {{stage}}"),
                ],
                "s",
            ),
            panel(
                "Requests by route and code",
                [(summed("route, code", "serving_requests_total", JOB), "{{route}} {{code}}")],
                "reqps",
            ),
            panel(
                "Request latency p99 by route",
                [(quantile("0.99", "route", "serving_request_duration_seconds", JOB), "{{route}}")],
                "s",
            ),
            panel("In-flight requests", [(f"sum(serving_inflight_requests{{{JOB}}})", "in flight")], "none"),
        ],
        [variable("job", "label_values(serving_requests_total, job)")],
    )

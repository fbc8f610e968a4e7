"""The Grafana dashboards, written as code and saved as provisioned JSON under observability/grafana/dashboards/.

    .venv/bin/python -m observability.dashboards      # rewrite the JSON files after changing a panel here

Tests check the saved files are what this module writes, and run every query against a real Prometheus.
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "grafana" / "dashboards"
DATASOURCE = {"type": "prometheus", "uid": "prometheus"}
RUN = 'stack=~"$stack", workers=~"$workers", batching=~"$batching"'


def panel(title: str, targets: list[tuple[str, str]], unit: str, x: int, y: int, w: int = 12, h: int = 8) -> dict:
    return {
        "type": "timeseries",
        "title": title,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(65 + i), "expr": expr, "legendFormat": legend, "datasource": DATASOURCE}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def variable(name: str, query: str) -> dict:
    return {
        "name": name,
        "type": "query",
        "datasource": DATASOURCE,
        "query": query,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"text": "All", "value": "$__all"},
    }


def dashboard(uid: str, title: str, panels: list[dict], variables: list[dict] | None = None) -> dict:
    for number, item in enumerate(panels, 1):
        item["id"] = number
    return {
        "uid": uid,
        "title": title,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "5s",
        "time": {"from": "now-15m", "to": "now"},
        "tags": ["transformer-serving"],
        "templating": {"list": variables or []},
        "panels": panels,
    }


def loadtest() -> dict:
    by = "stack, workers, batching, rate"
    return dashboard(
        "loadtest",
        "Load test",
        [
            panel(
                "Latency percentiles (from scheduled send time)",
                [
                    (
                        f"histogram_quantile(0.50, sum by (le, {by}) (rate(loadtest_latency_seconds_bucket{{{RUN}}}"
                        "[$__rate_interval])))",
                        "p50 {{stack}} w{{workers}} {{batching}} @{{rate}}",
                    ),
                    (
                        f"histogram_quantile(0.99, sum by (le, {by}) (rate(loadtest_latency_seconds_bucket{{{RUN}}}"
                        "[$__rate_interval])))",
                        "p99 {{stack}} w{{workers}} {{batching}} @{{rate}}",
                    ),
                ],
                "s",
                0,
                0,
            ),
            panel(
                "Throughput by status code",
                [
                    (
                        f"sum by ({by}, code) (rate(loadtest_requests_total{{{RUN}}}[$__rate_interval]))",
                        "{{code}} {{stack}} w{{workers}} {{batching}} @{{rate}}",
                    ),
                ],
                "reqps",
                12,
                0,
            ),
            panel(
                "Achieved versus target rate",
                [
                    (f"loadtest_achieved_rate{{{RUN}}}", "achieved {{stack}} w{{workers}} {{batching}}"),
                    (f"loadtest_target_rate{{{RUN}}}", "target {{stack}} w{{workers}} {{batching}}"),
                ],
                "reqps",
                0,
                8,
            ),
            panel(
                "Recorded p99 (rules.yml)",
                [
                    (f"loadtest:latency_seconds:p99{{{RUN}}}", "{{stack}} w{{workers}} {{batching}} @{{rate}}"),
                ],
                "s",
                12,
                8,
            ),
        ],
        [
            variable("stack", "label_values(loadtest_requests_total, stack)"),
            variable("workers", "label_values(loadtest_requests_total, workers)"),
            variable("batching", "label_values(loadtest_requests_total, batching)"),
        ],
    )


def triton() -> dict:
    sel = 'model=~"$model"'
    return dashboard(
        "triton",
        "Triton",
        [
            panel(
                "Average batch size",
                [
                    (
                        f"sum by (model) (rate(nv_inference_count{{{sel}}}[$__rate_interval])) / "
                        f"sum by (model) (rate(nv_inference_exec_count{{{sel}}}[$__rate_interval]))",
                        "{{model}}",
                    ),
                ],
                "none",
                0,
                0,
            ),
            panel(
                "Queue time per request",
                [
                    (
                        f"sum by (model) (rate(nv_inference_queue_duration_us{{{sel}}}[$__rate_interval])) / 1e6 / "
                        f"sum by (model) (rate(nv_inference_request_success{{{sel}}}[$__rate_interval]))",
                        "{{model}}",
                    ),
                ],
                "s",
                12,
                0,
            ),
            panel(
                "Compute time per batch",
                [
                    (
                        f"sum by (model) (rate(nv_inference_compute_infer_duration_us{{{sel}}}[$__rate_interval])) / 1e6 / "
                        f"sum by (model) (rate(nv_inference_exec_count{{{sel}}}[$__rate_interval]))",
                        "{{model}}",
                    ),
                ],
                "s",
                0,
                8,
            ),
            panel(
                "Requests: success and failure",
                [
                    (f"sum by (model) (rate(nv_inference_request_success{{{sel}}}[$__rate_interval]))", "ok {{model}}"),
                    (
                        f"sum by (model) (rate(nv_inference_request_failure{{{sel}}}[$__rate_interval]))",
                        "failed {{model}}",
                    ),
                ],
                "reqps",
                12,
                8,
            ),
        ],
        [variable("model", "label_values(nv_inference_count, model)")],
    )


def serving() -> dict:
    sel = 'job=~"$job"'
    return dashboard(
        "serving",
        "Serving API (FastAPI stack / gateway)",
        [
            panel(
                "Per-stage latency p99 (parse, preprocess, triton|inference, postprocess)",
                [
                    (
                        f"histogram_quantile(0.99, sum by (le, stage) (rate(serving_stage_duration_seconds_bucket{{{sel}}}"
                        "[$__rate_interval])))",
                        "p99 {{stage}}",
                    ),
                    (
                        f"histogram_quantile(0.50, sum by (le, stage) (rate(serving_stage_duration_seconds_bucket{{{sel}}}"
                        "[$__rate_interval])))",
                        "p50 {{stage}}",
                    ),
                ],
                "s",
                0,
                0,
            ),
            panel(
                "Requests by route and code",
                [
                    (
                        f"sum by (route, code) (rate(serving_requests_total{{{sel}}}[$__rate_interval]))",
                        "{{route}} {{code}}",
                    ),
                ],
                "reqps",
                12,
                0,
            ),
            panel(
                "Request latency p99 by route",
                [
                    (
                        f"histogram_quantile(0.99, sum by (le, route) (rate(serving_request_duration_seconds_bucket{{{sel}}}"
                        "[$__rate_interval])))",
                        "{{route}}",
                    ),
                ],
                "s",
                0,
                8,
            ),
            panel(
                "In-flight requests",
                [
                    (f"sum(serving_inflight_requests{{{sel}}})", "in flight"),
                ],
                "none",
                12,
                8,
            ),
        ],
        [variable("job", "label_values(serving_requests_total, job)")],
    )


def models() -> dict:
    """Per endpoint and version: traffic split (a canary's share), latency, errors, built-in input and output
    statistics, declared custom statistics and drift scores."""
    sel = 'endpoint=~"$endpoint"'
    by = "endpoint, version"
    rate = "[$__rate_interval]"
    return dashboard(
        "models",
        "Models: versions, traffic split, statistics, drift",
        [
            panel(
                "Traffic share by version",
                [
                    (
                        f"sum by ({by}) (rate(serving_endpoint_requests_total{{{sel}}}{rate})) / ignoring(version) "
                        f"group_left sum by (endpoint) (rate(serving_endpoint_requests_total{{{sel}}}{rate}))",
                        "{{endpoint}} v{{version}}",
                    ),
                ],
                "percentunit",
                0,
                0,
            ),
            panel(
                "Latency by version (p50, p99)",
                [
                    (
                        f"histogram_quantile(0.50, sum by (le, {by}) (rate(serving_endpoint_latency_seconds_bucket{{{sel}}}{rate})))",
                        "p50 {{endpoint}} v{{version}}",
                    ),
                    (
                        f"histogram_quantile(0.99, sum by (le, {by}) (rate(serving_endpoint_latency_seconds_bucket{{{sel}}}{rate})))",
                        "p99 {{endpoint}} v{{version}}",
                    ),
                ],
                "s",
                12,
                0,
            ),
            panel(
                "Requests by version and code",
                [
                    (
                        f"sum by ({by}, code) (rate(serving_endpoint_requests_total{{{sel}}}{rate}))",
                        "{{endpoint}} v{{version}} {{code}}",
                    ),
                ],
                "reqps",
                0,
                8,
            ),
            panel(
                "Token length per text (p50, p99) and truncation rate",
                [
                    (
                        f"histogram_quantile(0.50, sum by (le, {by}) (rate(serving_endpoint_token_length_bucket{{{sel}}}{rate})))",
                        "p50 tokens {{endpoint}} v{{version}}",
                    ),
                    (
                        f"histogram_quantile(0.99, sum by (le, {by}) (rate(serving_endpoint_token_length_bucket{{{sel}}}{rate})))",
                        "p99 tokens {{endpoint}} v{{version}}",
                    ),
                    (
                        f"sum by ({by}) (rate(serving_endpoint_truncated_texts_total{{{sel}}}{rate})) / "
                        f"sum by ({by}) (rate(serving_endpoint_texts_total{{{sel}}}{rate}))",
                        "truncated {{endpoint}} v{{version}}",
                    ),
                ],
                "none",
                12,
                8,
            ),
            panel(
                "Embedding norm (p50) and classifier top score (p50)",
                [
                    (
                        f"histogram_quantile(0.50, sum by (le, {by}) (rate(serving_endpoint_embedding_norm_bucket{{{sel}}}{rate})))",
                        "norm {{endpoint}} v{{version}}",
                    ),
                    (
                        f"histogram_quantile(0.50, sum by (le, {by}) (rate(serving_endpoint_top_score_bucket{{{sel}}}{rate})))",
                        "top score {{endpoint}} v{{version}}",
                    ),
                ],
                "none",
                0,
                16,
            ),
            panel(
                "Predicted labels",
                [
                    (
                        f"sum by ({by}, label) (rate(serving_endpoint_predicted_label_total{{{sel}}}{rate}))",
                        "{{endpoint}} v{{version}} {{label}}",
                    ),
                ],
                "reqps",
                12,
                16,
            ),
            panel(
                "Declared custom statistics (observations per second)",
                [
                    (
                        f'sum by (__name__, version) (rate({{__name__=~"serving_custom_.+_count"}}{rate}))',
                        "{{__name__}} v{{version}}",
                    ),
                ],
                "none",
                0,
                24,
            ),
            panel(
                "Drift scores (PSI alert threshold 0.25)",
                [
                    (
                        f"max by ({by}, feature, method) (serving_drift_score{{{sel}}})",
                        "{{method}} {{feature}} {{endpoint}} v{{version}}",
                    ),
                ],
                "none",
                12,
                24,
            ),
        ],
        [variable("endpoint", "label_values(serving_endpoint_requests_total, endpoint)")],
    )


DASHBOARDS = {"loadtest.json": loadtest, "triton.json": triton, "serving.json": serving, "models.json": models}


def render() -> dict[str, str]:
    return {name: json.dumps(build(), indent=2) + "\n" for name, build in DASHBOARDS.items()}


def queries(text: str) -> list[str]:
    """Every PromQL expression of a saved dashboard: its panels' targets, and each template variable's
    `label_values(metric, label)` (Grafana syntax) as the PromQL that answers it, `count by (label) (metric)`."""
    data = json.loads(text)
    panels = [t["expr"] for p in data["panels"] for t in p["targets"]]
    variables = []
    for item in data["templating"]["list"]:
        metric, label = (part.strip() for part in item["query"].removeprefix("label_values(").rstrip(")").split(","))
        variables.append(f"count by ({label}) ({metric})")
    return panels + variables


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}")

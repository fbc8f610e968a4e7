"""Triton's dashboard, from its own `nv_inference_*` counters per model: how full its dynamic batches are, how long a
request waits in its queue, how long a batch computes, and how many requests succeed or fail."""

from __future__ import annotations

from observability.dashboards.panels import dashboard, panel, summed, variable

MODEL = 'model=~"$model"'


def per_model(metric: str) -> str:
    return summed("model", metric, MODEL)


def triton() -> dict:
    return dashboard(
        "triton",
        "Triton",
        [
            panel(
                "Average batch size",
                [(f"{per_model('nv_inference_count')} / {per_model('nv_inference_exec_count')}", "{{model}}")],
                "none",
            ),
            panel(
                "Queue time per request",
                [
                    (
                        f"{per_model('nv_inference_queue_duration_us')} / 1e6 / "
                        f"{per_model('nv_inference_request_success')}",
                        "{{model}}",
                    ),
                ],
                "s",
            ),
            panel(
                "Compute time per batch",
                [
                    (
                        f"{per_model('nv_inference_compute_infer_duration_us')} / 1e6 / "
                        f"{per_model('nv_inference_exec_count')}",
                        "{{model}}",
                    ),
                ],
                "s",
            ),
            panel(
                "Requests: success and failure",
                [
                    (per_model("nv_inference_request_success"), "ok {{model}}"),
                    (per_model("nv_inference_request_failure"), "failed {{model}}"),
                ],
                "reqps",
            ),
        ],
        [variable("model", "label_values(nv_inference_count, model)")],
    )

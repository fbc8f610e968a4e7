"""The load generator's dashboard: client-side latency from the scheduled send time, throughput and achieved rate,
per run (stack, workers, batching, offered rate)."""

from __future__ import annotations

from observability.dashboards.panels import dashboard, panel, quantile, summed, variable

RUN = 'stack=~"$stack", workers=~"$workers", batching=~"$batching"'
BY = "stack, workers, batching, rate"
RUN_LEGEND = "{{stack}} w{{workers}} {{batching}}"
ATTACK_LEGEND = RUN_LEGEND + " @{{rate}}"  # one attack of a run: its offered rate too


def loadtest() -> dict:
    latency = "loadtest_latency_seconds"
    return dashboard(
        "loadtest",
        "Load test",
        [
            panel(
                "Latency percentiles (from scheduled send time)",
                [
                    (quantile("0.50", BY, latency, RUN), "p50 " + ATTACK_LEGEND),
                    (quantile("0.99", BY, latency, RUN), "p99 " + ATTACK_LEGEND),
                ],
                "s",
            ),
            panel(
                "Throughput by status code",
                [(summed(f"{BY}, code", "loadtest_requests_total", RUN), "{{code}} " + ATTACK_LEGEND)],
                "reqps",
            ),
            panel(
                "Achieved versus target rate",
                [
                    (f"loadtest_achieved_rate{{{RUN}}}", "achieved " + RUN_LEGEND),
                    (f"loadtest_target_rate{{{RUN}}}", "target " + RUN_LEGEND),
                ],
                "reqps",
            ),
            panel(
                "Recorded p99 (rules.yml)",
                [(f"loadtest:latency_seconds:p99{{{RUN}}}", ATTACK_LEGEND)],
                "s",
            ),
        ],
        [variable(name, f"label_values(loadtest_requests_total, {name})") for name in ("stack", "workers", "batching")],
    )

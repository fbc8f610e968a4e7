"""Observability shared by every service: structured logging and reading the run's logs back, Prometheus metrics
(and the project's one latency bucket ladder), OpenTelemetry tracing, the Grafana dashboards written as code.

Config for the tools themselves lives beside the code: `prometheus/` (scrape config, recording and alert rules) and
`grafana/` (provisioning, and the dashboards' saved JSON that `dashboards` writes).
"""

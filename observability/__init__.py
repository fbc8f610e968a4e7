"""Observability shared by every service: structured logging, Prometheus metrics, OpenTelemetry tracing.

Config for the tools themselves lives beside the code: `prometheus/` (scrape config, recording rules) and
`grafana/` (provisioned dashboards).
"""

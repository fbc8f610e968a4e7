"""The Grafana dashboards without Grafana: each panel's PromQL, exactly as the saved dashboard JSON has it, with its
template variables given values (`queries`), asked of a Prometheus over a time range and drawn into images with a page
that shows them (`images`): `serving dashboards`."""

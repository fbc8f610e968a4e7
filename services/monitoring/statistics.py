"""Custom statistics as clearml-serving declares them (`serving metrics add ENDPOINT --variable-scalar x=0,1,2 ...`).

A declared variable is filled, for each sampled request, from the first of:
1. what the endpoint's preprocess code reported with `collect_custom_statistics_fn({"x": ...})`,
2. the response body's field of that name,
3. the request body's field of that name;
a request where none has it records nothing. Only declared variables become metrics, so label sets stay bounded:
an enum value outside the declared ones counts as `other`; undeclared names reported by preprocess code are counted
per endpoint in `serving_custom_undeclared_total` and dropped.
"""

from __future__ import annotations

import logging
import random
import re
from typing import Any, Literal

from prometheus_client import Counter, Gauge, Histogram, Summary
from pydantic import BaseModel, Field, model_validator

log = logging.getLogger(__name__)

Kind = Literal["scalar", "enum", "value", "counter"]
UNDECLARED = Counter(
    "serving_custom_undeclared_total", "Values reported by preprocess code for variables nobody declared", ["endpoint"]
)


class Variable(BaseModel):
    kind: Kind
    buckets: list[float] = Field(default_factory=list)
    """scalar: histogram bucket upper bounds, increasing."""
    values: list[str] = Field(default_factory=list)
    """enum: the values counted by name; anything else counts as `other`."""

    @model_validator(mode="after")
    def _complete(self) -> Variable:
        if self.kind == "scalar" and (not self.buckets or self.buckets != sorted(set(self.buckets))):
            raise ValueError("a scalar variable needs increasing buckets, e.g. x=0,1,2,5,10")
        if self.kind == "enum" and not self.values:
            raise ValueError("an enum variable needs its values, e.g. lang=en,de,fr")
        return self


class EndpointMetrics(BaseModel):
    variables: dict[str, Variable] = Field(default_factory=dict)
    log_frequency: float = Field(1.0, ge=0.0, le=1.0)
    """Fraction of requests whose variables are recorded."""


def metric_name(endpoint: str, variable: str) -> str:
    return "serving_custom_" + re.sub(r"[^a-zA-Z0-9_]", "_", f"{endpoint}_{variable}")


class _Families:
    """One Prometheus family per declared (endpoint, variable, kind, buckets), created once per process."""

    def __init__(self):
        self.created: dict[tuple, Any] = {}

    def get(self, endpoint: str, name: str, variable: Variable) -> Any:
        key = (endpoint, name, variable.kind, tuple(variable.buckets))
        family = self.created.get(key)
        if family is not None:
            return family
        base, doc = metric_name(endpoint, name), f"Declared variable '{name}' of endpoint '{endpoint}'"
        if any(k[:2] == (endpoint, name) for k in self.created):  # re-declared with other buckets or kind
            base += f"_{len(self.created)}"
        if variable.kind == "scalar":
            family = Histogram(base, doc, ["version"], buckets=variable.buckets)
        elif variable.kind == "enum":
            family = Counter(base, doc, ["version", "value"])
        elif variable.kind == "counter":
            family = Counter(base, doc, ["version"])
        else:
            family = (
                Gauge(base, doc + " (last value)", ["version"], multiprocess_mode="mostrecent"),
                Summary(base + "_observed", doc + " (every value)", ["version"]),
            )
        self.created[key] = family
        return family


FAMILIES = _Families()


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def lookup(name: str, collected: dict, response: Any, body: Any) -> Any:
    for source in (collected, response, body):
        if isinstance(source, dict) and name in source:
            return source[name]
    return None


def record(
    endpoint: str,
    version: str,
    declared: EndpointMetrics | None,
    collected: dict | None,
    response: Any,
    body: Any,
) -> None:
    """Record the declared variables of one request (sampled at the endpoint's log frequency); the drift judges
    read scalar and enum ones back as features `custom:<name>` (`host_counts`, `fleet_counts`)."""
    collected = collected or {}
    if declared is None or not declared.variables:
        if collected:
            UNDECLARED.labels(endpoint).inc(len(collected))
        return
    undeclared = len(set(collected) - set(declared.variables))
    if undeclared:
        UNDECLARED.labels(endpoint).inc(undeclared)
    if declared.log_frequency < 1.0 and random.random() >= declared.log_frequency:
        return
    for name, variable in declared.variables.items():
        value = lookup(name, collected, response, body)
        if value is None:
            continue
        family = FAMILIES.get(endpoint, name, variable)
        if variable.kind == "enum":
            text = str(value)
            bucket = text if text in variable.values else "other"
            family.labels(version, bucket).inc()
            continue
        number = _number(value)
        if number is None:
            log.debug("variable '%s' of '%s' is not a number: %r", name, endpoint, value)
            continue
        if variable.kind == "scalar":
            family.labels(version).observe(number)
        elif variable.kind == "counter":
            family.labels(version).inc(max(number, 0.0))
        else:
            gauge, summary = family
            gauge.labels(version).set(number)
            summary.labels(version).observe(number)

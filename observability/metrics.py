"""Prometheus metrics shared by the HTTP services; correct with several gunicorn workers.

Each gunicorn service is started with PROMETHEUS_MULTIPROC_DIR in its environment (an empty directory per service:
`services.stacks.http_service`, or the gateway image); each worker writes its samples to files there and `/metrics`
merges them (prometheus-client multiprocess mode). Without it (an app served in-process, as in the unit tests) the
metrics live in this process's default registry. Histograms are cumulative Prometheus histograms, so
`histogram_quantile` works across workers. What every request records goes through the process's tally
(`observability.tally`), one write per series per flush.
"""

from __future__ import annotations

import asyncio
import os
import time
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    values,
)
from prometheus_client.metrics import MetricWrapperBase

from observability import tracing
from observability.tally import TALLY, Flusher

# In multiprocess mode every sample write asks os.getpid() (a system call) to notice a fork, a visible share of a
# gateway worker's CPU (docs/decisions/measured-defaults.md): the pid is cached and refreshed in the child after
# every fork instead.
_pid = os.getpid()


def _refresh_pid() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_refresh_pid)
if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    values.ValueClass = values.MultiProcessValue(process_identifier=lambda: _pid)

REGISTRY.register(Flusher())  # ahead of the metrics below: a read of the registry sees what was tallied

# From 100 us to 30 s: fine enough for a tokenizer stage and for a saturated server's queueing; 30 s is also the
# load generator's default request timeout. The one latency ladder of the project: the load generator's histogram
# (loadtest.metrics) uses it too, so the client's and the servers' latency compare bucket for bucket.
LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.02,
    0.03,
    0.05,
    0.075,
    0.1,
    0.15,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)

REQUESTS = Counter("serving_requests_total", "HTTP requests by route and status code", ["route", "code"])
REQUEST_LATENCY = Histogram(
    "serving_request_duration_seconds",
    "Time from request start to response, by route",
    ["route"],
    buckets=LATENCY_BUCKETS,
)
STAGE_LATENCY = Histogram(
    "serving_stage_duration_seconds",
    "Time spent in each stage of a prediction (parse, preprocess, triton or inference, postprocess)",
    ["stage"],
    buckets=LATENCY_BUCKETS,
)
INFLIGHT = Gauge("serving_inflight_requests", "Requests being handled now", multiprocess_mode="livesum")
USER_CODE_THREADS_BUSY = Gauge(
    "serving_user_code_threads_busy",
    "Gateway threads running synchronous user code now (preprocess steps, model engines' predict); code that never "
    "returns keeps its thread",
    multiprocess_mode="livesum",
)
COALESCED_TEXTS = Histogram(
    "serving_coalesced_batch_texts",
    "Texts in each coalesced batch a worker sent to its backend (1: a request went alone)",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128),
)
TRITON_RETRIES = Counter(
    "serving_triton_retries_total", "Triton calls sent once more because their replica went away with them"
)
TRITON_REPLICA_EJECTED = Gauge(
    "serving_triton_replica_ejected",
    "Gateway workers that have this Triton replica out of rotation now, by why: unavailable (its connection lost), "
    "internal (INTERNAL where another replica answered), not_found (a model it alone lacks; out for that model only)",
    ["replica", "reason"],
    multiprocess_mode="livesum",
)
TRITON_EJECTIONS = Counter(
    "serving_triton_ejections_total",
    "Times a gateway worker took a Triton replica out of rotation",
    ["replica", "reason"],
)
TRITON_HEDGES = Counter(
    "serving_triton_hedges_total",
    "Triton calls copied to another replica because the replica they were on kept them unanswered past twice their "
    "size's usual time (the first answer wins), by that replica",
    ["replica"],
)
TRITON_SEQUENCES = Counter(
    "serving_triton_sequences_total",
    "Sequences a Triton replica answered for this gateway's callers (GATEWAY_TRITON_BALANCE=least_work over several "
    "replicas), by replica; the copies sent to a slow replica to see it recover are not counted",
    ["replica"],
)
TOKENS = Counter("serving_tokens_total", "Tokens processed (after truncation)")
TRUNCATED = Counter("serving_truncated_texts_total", "Texts truncated to the model's maximum length")
CONFIG_ERRORS = Gauge(
    "serving_config_errors",
    "Problems in a configuration file the server reads (its entries left out, or the whole file not applied)",
    ["file"],
    multiprocess_mode="max",
)
STATE_STORE_UP = Gauge(
    "serving_state_store_up",
    "1 while the shared deployment state store answers every worker, 0 while one cannot reach it (the last state it "
    "read keeps serving), by the store's kind (sqlite, postgresql)",
    ["backend"],
    multiprocess_mode="livemin",  # labelled: a process that never polls a store (gunicorn's master) adds no sample
)
STATE_STORE_REGRESSED = Gauge(
    "serving_state_store_regressed",
    "1 while a worker finds that the deployment state store lost its state (no tables, an empty or foreign file) or "
    "holds an older one than the worker applied: not applied, the last good state keeps serving until an operator "
    "restores the store (`serving state restore FILE`), by the store's kind",
    ["backend"],
    multiprocess_mode="livemax",
)
MODEL_INFO = Gauge(
    "serving_model_info",
    "The model being served (value 1)",
    ["model", "version", "task"],
    multiprocess_mode="max",
)


# Per endpoint and version (clearml-serving's `<endpoint>_latency`/`_count`): labels are set only after the endpoint
# and version were resolved, so unknown names never create series.
ENDPOINT_REQUESTS = Counter(
    "serving_endpoint_requests_total", "Requests by endpoint, version and status code", ["endpoint", "version", "code"]
)
ENDPOINT_LATENCY = Histogram(
    "serving_endpoint_latency_seconds",
    "Time from the endpoint's version being chosen to its response, by endpoint and version",
    ["endpoint", "version"],
    buckets=LATENCY_BUCKETS,
)


class endpoint_request:
    """Count and time one request answered by `version` of `endpoint`, with the status it ends with; one cancelled
    (its client gone, its deadline passed: `services.api.lifetime`) as 499, not as the version's failure."""

    __slots__ = ("labels", "start")

    def __init__(self, endpoint: str, version: str):
        self.labels = (endpoint, version)

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if kind is None:
            code = "200"
        elif issubclass(kind, Exception):
            code = str(getattr(error, "status_code", 500))
        else:
            code = "499" if issubclass(kind, asyncio.CancelledError) else "500"
        TALLY.inc(child(ENDPOINT_REQUESTS, *self.labels, code))
        TALLY.observe(child(ENDPOINT_LATENCY, *self.labels), time.perf_counter() - self.start)


# Built-in input and output statistics per endpoint and version (services.monitoring.builtin).
TEXTS_PER_REQUEST = Histogram(
    "serving_endpoint_texts_per_request",
    "Texts in one request",
    ["endpoint", "version"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128),
)
TOKEN_LENGTH = Histogram(
    "serving_endpoint_token_length",
    "Tokens per text after truncation",
    ["endpoint", "version"],
    buckets=(4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512),
)
ENDPOINT_TEXTS = Counter("serving_endpoint_texts_total", "Texts processed", ["endpoint", "version"])
ENDPOINT_TRUNCATED = Counter(
    "serving_endpoint_truncated_texts_total", "Texts truncated to the model's maximum length", ["endpoint", "version"]
)
EMBEDDING_NORM = Histogram(
    "serving_endpoint_embedding_norm",
    "L2 norm of each returned embedding (embedding models)",
    ["endpoint", "version"],
    buckets=(0.5, 0.8, 0.9, 0.95, 0.99, 1.01, 1.05, 1.1, 1.25, 1.5, 2, 5, 10, 20, 50),
)
PREDICTED_LABEL = Counter(
    "serving_endpoint_predicted_label_total", "Predicted labels (classifiers)", ["endpoint", "version", "label"]
)
TOP_SCORE = Histogram(
    "serving_endpoint_top_score",
    "Probability of the predicted label (classifiers)",
    ["endpoint", "version"],
    buckets=(0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0),
)

_Metric = TypeVar("_Metric", bound=MetricWrapperBase)
_CHILDREN: dict = {}


def child(metric: _Metric, *labels: str) -> _Metric:
    """`metric.labels(*labels)`, cached: `labels()` takes a lock and builds its key on every call, a share of a
    gateway worker's CPU when every request calls it several times (docs/decisions/measured-defaults.md). Only for
    labels from a bounded set (routes, codes, endpoints and versions already resolved)."""
    found = _CHILDREN.get((metric, labels))
    if found is None:
        found = _CHILDREN[(metric, labels)] = metric.labels(*labels)
    return found


class stage:
    """Time one stage of a request into `serving_stage_duration_seconds{stage=name}`; in a sampled trace the stage
    is also a span of that name, the unit of `serving analyze`'s decomposition."""

    __slots__ = ("name", "start", "span")

    def __init__(self, name: str):
        self.name = name
        self.span: AbstractContextManager[object] | None = None

    def __enter__(self) -> None:
        self.start = time.perf_counter()
        if tracing.tracing_enabled() and tracing.current_span_sampled():
            self.span = tracing.get_tracer("serving.stages").start_as_current_span(self.name)
            self.span.__enter__()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        try:
            if self.span is not None:
                self.span.__exit__(kind, error, traceback)
        finally:
            TALLY.observe(child(STAGE_LATENCY, self.name), time.perf_counter() - self.start)


def merged_registry() -> CollectorRegistry:
    """What `/metrics` shows: every worker's samples merged in multiprocess mode (this worker's tallies flushed
    first), else this process's registry."""
    TALLY.flush()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


def metrics_payload() -> tuple[bytes, str]:
    """The exposition text for `/metrics`: merged over all workers in multiprocess mode."""
    return generate_latest(merged_registry()), CONTENT_TYPE_LATEST


def endpoint_request_counts() -> dict[tuple[str, str], float]:
    """Requests answered so far by (endpoint, version), summed over status codes and workers."""
    from prometheus_client.parser import text_string_to_metric_families

    counts: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(metrics_payload()[0].decode()):
        if family.name == "serving_endpoint_requests":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    key = (sample.labels["endpoint"], sample.labels["version"])
                    counts[key] = counts.get(key, 0.0) + sample.value
    return counts


def mark_worker_dead(pid: int) -> None:
    """gunicorn `child_exit` hook: drop a dead worker's live gauges."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(pid)

"""The controller process (`serving controller`, `python -m services.controller`): settings read once,
logging, and the real collaborators: the MLflow registry, Triton's HTTP model-control API, the gateway's /metrics.
Its own /metrics (`CONTROLLER_METRICS_HOST:CONTROLLER_METRICS_PORT`, Prometheus' `controller` job) has
`serving_registry_up`, `serving_rollouts_paused`, and with a Prometheus the fleet's drift scores."""

from __future__ import annotations

import logging
import os

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from services.controller.fleet_monitor import start_fleet_drift
from services.controller.loop import Controller
from services.controller.settings import ControllerSettings, Placement
from services.triton.control_key import read_control_key
from services.triton.model_control import TritonModels
from services.triton.repository import RenderOptions


def main() -> None:
    from observability.logging import setup_logging
    from services.registry.mlflow_registry import ModelRegistry
    from services.registry.settings import RegistrySettings

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    # The controller retries a failing step itself, with its own backoff, and says so; MLflow's client would
    # otherwise retry each call for minutes inside one step and stall every endpoint's reconciliation.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    settings = ControllerSettings()
    setup_logging("INFO", json_lines=settings.log_json)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a readiness probe a second is not news
    options = RenderOptions(target=settings.triton_target, gpu=settings.triton_gpu)
    local = settings.placement == Placement.LOCAL  # with agents, the controller touches no Triton
    key = read_control_key(settings.triton_control_key_file) if local else None
    triton = TritonModels(settings.triton_repository, settings.triton_http_url, options, control_key=key)
    registry = ModelRegistry(RegistrySettings(run_dir=settings.run_dir))
    controller = Controller(settings, registry, triton)
    metrics = CollectorRegistry()
    up = Gauge("serving_registry_up", "1 while the model registry answers the controller, else 0", registry=metrics)
    up.set_function(lambda: float(controller.registry_watch.up))
    paused = Gauge(
        "serving_rollouts_paused",
        "Rollouts paused because Prometheus does not answer for their numbers (neither promoted nor rolled back)",
        registry=metrics,
    )
    paused.set_function(lambda: float(len(controller.rollouts.paused)))
    start_fleet_drift(settings, controller.store, metrics)  # with a Prometheus: drift judged on the fleet
    start_http_server(settings.metrics_port, settings.metrics_host, metrics)
    logging.getLogger("controller").info(
        "metrics on http://%s:%d/metrics", settings.metrics_host, settings.metrics_port
    )
    controller.run()
    # Every step's result is already committed to the state store and MLflow's: nothing is left to finalize, and the
    # interpreter's own teardown of MLflow, SQLAlchemy and ONNX Runtime would only delay `serving down` by seconds.
    logging.shutdown()
    os._exit(0)

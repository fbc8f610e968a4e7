"""The real adapters (MLflow registry, Triton model control) and the unit tests' fakes take the calls the controller
makes through `services.lifecycle.ports`: same methods, parameters in the same places; extra ones have defaults."""

from __future__ import annotations

import inspect

import pytest

from services.controller.gateway_metrics import HttpGatewayMetrics, PrometheusGatewayMetrics
from services.lifecycle.ports import GatewayMetrics, Registry, TritonControl
from services.registry.mlflow_registry import ModelRegistry
from services.triton.model_control import TritonModels
from tests.unit.controller.fakes import FakeMetrics, FakeRegistry, FakeTriton


def methods(protocol: type) -> list[str]:
    return [name for name, value in vars(protocol).items() if inspect.isfunction(value) and not name.startswith("_")]


@pytest.mark.parametrize(
    "protocol, implementation",
    [
        (Registry, ModelRegistry),
        (Registry, FakeRegistry),
        (TritonControl, TritonModels),
        (TritonControl, FakeTriton),
        (GatewayMetrics, HttpGatewayMetrics),
        (GatewayMetrics, PrometheusGatewayMetrics),
        (GatewayMetrics, FakeMetrics),
    ],
)
def test_the_implementation_takes_every_call_of_the_protocol(protocol, implementation):
    assert methods(protocol)
    for name in methods(protocol):
        wanted = list(inspect.signature(getattr(protocol, name)).parameters.values())
        given = list(inspect.signature(getattr(implementation, name)).parameters.values())
        assert [p.name for p in given[: len(wanted)]] == [p.name for p in wanted], f"{implementation.__name__}.{name}"
        extra = given[len(wanted) :]
        assert all(p.default is not inspect.Parameter.empty for p in extra), f"{implementation.__name__}.{name}"

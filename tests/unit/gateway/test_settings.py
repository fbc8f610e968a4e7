"""The gateway's settings: the shared ones under their one `SERVING_` name, its own under `GATEWAY_`, and a start
refused on a `GATEWAY_` name it does not read (pydantic-settings 2.16's behaviour, checked here)."""

from __future__ import annotations

import os

import pytest

from services.common.errors import ConfigurationError
from services.common.settings import ApiSettings
from services.gateway.app import create_app
from services.gateway.settings import GatewaySettings, refuse_unknown_names


@pytest.fixture
def env(monkeypatch):
    for key in list(os.environ):
        if key.upper().startswith(("SERVING_", "GATEWAY_", "MLFLOW_", "TRITON_", "STATE_URL")):
            monkeypatch.delenv(key)
    return monkeypatch


def test_shared_settings_are_read_under_serving_names_and_own_under_gateway(env):
    env.setenv("SERVING_WORKERS", "3")
    env.setenv("SERVING_MAX_INFLIGHT", "9")
    env.setenv("SERVING_OBSERVABILITY__LOG_JSON", "true")
    env.setenv("SERVING_MONITORING__WORKER_SCORES", "false")
    env.setenv("SERVING_STATE_URL", "sqlite:///s.db")
    env.setenv("GATEWAY_TRITON_MODEL", "m2")
    env.setenv("GATEWAY_BUCKETS", "[16, 32]")
    env.setenv("GATEWAY_MAX_TEXTS", "5")  # a stale name: not read (and refused at start, below)
    settings = GatewaySettings()
    assert (settings.workers, settings.max_inflight, settings.max_texts) == (3, 9, 64)
    assert settings.observability.log_json and not settings.monitoring.worker_scores
    assert settings.triton_model == "m2" and settings.buckets == [16, 32] and settings.state_url == "sqlite:///s.db"


def test_fields_are_set_by_name_too(env):
    env.setenv("GATEWAY_TRITON_MODEL", "from-env")
    built = GatewaySettings(triton_model="m", workers=2, observability={"log_json": True})
    assert (built.triton_model, built.workers, built.observability.log_json) == ("m", 2, True)
    validated = GatewaySettings.model_validate({"triton_grpc_url": "h:1", "admin_max_body_bytes": 10})
    assert validated.triton_grpc_url == "h:1" and validated.admin_max_body_bytes == 10
    assert validated.triton_model == "from-env", "model_validate reads the environment as well"


def test_a_bare_field_name_is_not_read_but_its_serving_form_is_and_is_refused(env):
    """An alias with the field name among its choices would make `TRITON_MODEL` (any process's variable) a setting;
    the field name itself is read with the class's prefix, which the start refuses."""
    env.setenv("TRITON_MODEL", "bare")
    env.setenv("STATE_URL", "sqlite:///bare.db")
    assert GatewaySettings().triton_model == "encoder" and GatewaySettings().state_url is None
    env.setenv("SERVING_TRITON_MODEL", "prefixed")
    assert GatewaySettings().triton_model == "prefixed"
    with pytest.raises(ConfigurationError, match="^SERVING_TRITON_MODEL is not a setting: the gateway reads GATEWAY_"):
        refuse_unknown_names(os.environ)


def test_coalesce_is_the_one_default_that_differs_between_the_stacks(env):
    assert GatewaySettings().coalesce and not ApiSettings().coalesce
    env.setenv("SERVING_COALESCE", "false")
    assert not GatewaySettings().coalesce


@pytest.mark.parametrize(
    "name, says",
    [
        ("GATEWAY_MAX_TEXTS", "GATEWAY_MAX_TEXTS is not a gateway setting: every HTTP stack reads SERVING_MAX_TEXTS"),
        ("gateway_workers", "gateway_workers is not a gateway setting: every HTTP stack reads SERVING_WORKERS"),
        (
            "GATEWAY_OBSERVABILITY__LOG_JSON",
            "every HTTP stack reads SERVING_OBSERVABILITY__LOG_JSON",
        ),
        ("GATEWAY_MONITORING__WORKER_SCORES", "every HTTP stack reads SERVING_MONITORING__WORKER_SCORES"),
        ("GATEWAY_TRITON_GRPC", "nor one the HTTP stacks share: did you mean GATEWAY_TRITON_GRPC_URL?"),
        ("GATEWAY_COLOUR", "GATEWAY_COLOUR is not a gateway setting, nor one the HTTP stacks share: see"),
        ("GATEWAY_PORT", "every HTTP stack reads SERVING_PORT"),
        ("SERVING_REGISTRY_URL", "SERVING_REGISTRY_URL is not a setting: the gateway reads MLFLOW_TRACKING_URI"),
    ],
)
def test_a_name_the_gateway_does_not_read_stops_it_with_the_name_to_use(name, says):
    with pytest.raises(ConfigurationError) as refused:
        refuse_unknown_names({"GATEWAY_TRITON_MODEL": "m", name: "1"})
    assert says in refused.value.message and "\n" not in refused.value.message


def test_own_names_shared_names_and_kubernetes_service_links_pass():
    refuse_unknown_names(
        {
            "GATEWAY_TRITON_GRPC_URL": "h:1",
            "GATEWAY_ADMIN_TOKEN_FILE": "/t",
            "SERVING_MAX_TEXTS": "5",
            "SERVING_STATE_URL": "sqlite:///s.db",
            "SERVING_RUN_DIR": "run",
            "MLFLOW_TRACKING_URI": "http://m",
            "CONTROLLER_GATEWAY_URL": "http://g",
            "GATEWAY_SERVICE_HOST": "10.0.0.7",
            "GATEWAY_SERVICE_PORT_HTTP": "8080",
            "GATEWAY_PORT": "tcp://10.0.0.7:8080",
            "GATEWAY_PORT_8080_TCP_ADDR": "10.0.0.7",
        }
    )


def test_the_app_refuses_to_start_on_a_stale_name(env):
    env.setenv("GATEWAY_MAX_INFLIGHT", "4")
    with pytest.raises(ConfigurationError, match="every HTTP stack reads SERVING_MAX_INFLIGHT"):
        create_app()


@pytest.mark.parametrize(
    "environ",
    [
        {"GATEWAY_ADMIN_SERVICE_HOST": "10.0.0.7", "GATEWAY_ADMIN_PORT": "tcp://10.0.0.7:8080"},
        {"GATEWAY_CANARY_PORT_8080_TCP_ADDR": "10.0.0.8", "GATEWAY_CANARY_SERVICE_PORT_HTTP": "8080"},
    ],
)
def test_service_links_of_other_gateway_services_pass(environ):
    refuse_unknown_names(environ)


@pytest.mark.parametrize(
    "environ", [{"SERVING_OBSERVABILITY__LOG_JSON": "yes"}, {"SERVING_OBSERVABILITY": '{"log_json": true}'}]
)
def test_gunicorn_reads_the_json_log_switch_as_the_app_does(monkeypatch, environ):
    from services.common.settings import ApiSettings, LogSettings

    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert ApiSettings().observability.log_json and LogSettings().observability.log_json


def test_the_balance_over_triton_replicas_is_least_work_unless_round_robin_is_asked_for(env):
    assert GatewaySettings().triton_balance == "least_work"
    env.setenv("GATEWAY_TRITON_BALANCE", "round_robin")
    assert GatewaySettings().triton_balance == "round_robin"
    env.setenv("GATEWAY_TRITON_BALANCE", "random")
    with pytest.raises(ValueError, match="least_work"):
        GatewaySettings()

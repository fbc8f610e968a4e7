"""`to_env`: settings written as a child's environment read back equal, under the names the schema gives."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from services.common.settings import ApiSettings
from services.common.settings_env import to_env, variables
from services.controller.settings import ControllerSettings
from services.gateway.settings import GatewaySettings

OURS = ("SERVING_", "GATEWAY_", "CONTROLLER_", "MLFLOW_")


@pytest.fixture
def clean_env(monkeypatch):
    """An environment with none of the project's settings, so only what a test sets is read."""
    for key in list(os.environ):
        if key.upper().startswith(OURS):
            monkeypatch.delenv(key)
    return monkeypatch


def read_back(cls, env: dict[str, str], monkeypatch):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return cls()


SHARED = {
    "model_dir": Path("/models/m"),
    "workers": 3,
    "truncate": False,
    "coalesce_depth": 2,
    "sim_fixed_us": 12.5,
    "device": "sim",
    "api_keys": ["k1", "k 2"],
    "api_keys_file": Path("/keys"),
    "observability": {"log_json": True, "sampling_ratio": 0.25, "otlp_endpoint": "http://c:4318/v1/traces"},
    "monitoring": {"worker_scores": False, "interval": 0.5},
    "completion_log_sample": 1.0,
}


def test_shared_settings_round_trip_under_serving_names(clean_env):
    settings = ApiSettings.model_validate(SHARED)
    env = to_env(settings)
    assert env["SERVING_WORKERS"] == "3" and env["SERVING_TRUNCATE"] == "false"
    assert json.loads(env["SERVING_API_KEYS"]) == ["k1", "k 2"], "secrets by value, lists as JSON"
    assert env["SERVING_OBSERVABILITY__LOG_JSON"] == "true" and env["SERVING_MONITORING__INTERVAL"] == "0.5"
    assert "SERVING_PORT" not in env and "SERVING_OBSERVABILITY__TRACING" not in env, "only fields set"
    assert read_back(ApiSettings, env, clean_env) == settings


def test_gateway_settings_round_trip_with_their_own_names(clean_env):
    own = {
        "triton_grpc_url": "10.0.0.1:8001,10.0.0.2:8001",
        "buckets": [16, 64],
        "endpoints_file": Path("/etc/endpoints.json"),
        "versions_from_registry": True,
        "admin_token": "s3cret",
        "state_url": "postgresql://db/state",
        "registry_url": "http://mlflow:5000",
        "coalesce": False,
    }
    settings = GatewaySettings.model_validate(SHARED | own)
    env = to_env(settings)
    assert env["GATEWAY_TRITON_GRPC_URL"] == own["triton_grpc_url"] and env["GATEWAY_BUCKETS"] == "[16, 64]"
    assert env["GATEWAY_ADMIN_TOKEN"] == "s3cret" and env["GATEWAY_VERSIONS_FROM_REGISTRY"] == "true"
    assert env["SERVING_STATE_URL"] == own["state_url"] and env["MLFLOW_TRACKING_URI"] == own["registry_url"]
    assert env["SERVING_WORKERS"] == "3" and env["SERVING_COALESCE"] == "false"
    assert not any(key.startswith("GATEWAY_") and key.removeprefix("GATEWAY_") in str(SHARED).upper() for key in env)
    back = read_back(GatewaySettings, env, clean_env)
    assert back == settings and back.admin_token == SecretStr("s3cret")


def test_another_prefix_and_aliases_round_trip(clean_env, tmp_path):
    settings = ControllerSettings.model_validate({"run_dir": tmp_path, "state_url": "sqlite:///s.db"})
    env = to_env(settings)
    assert env == {"SERVING_RUN_DIR": str(tmp_path), "SERVING_STATE_URL": "sqlite:///s.db"}
    assert read_back(ControllerSettings, env, clean_env) == settings


def test_none_is_left_unset_where_it_is_the_default(clean_env):
    assert "SERVING_ENDPOINT" not in to_env(ApiSettings.model_validate({"endpoint": None, "workers": 2}))


SAMPLES = {int: ("7", 7), float: ("7.5", 7.5), str: ("x7", "x7")}


@pytest.mark.parametrize("cls", [ApiSettings, GatewaySettings, ControllerSettings])
def test_every_name_listed_is_one_the_class_reads(clean_env, cls):
    """Each listed variable of a plain type, set alone, reaches its field, nested ones (`__`) too: the field takes
    the value, or refuses it by name (a value out of the field's range)."""
    checked = 0
    for variable in variables(cls):
        if variable.field.annotation not in SAMPLES:
            continue
        text, value = SAMPLES[variable.field.annotation]
        clean_env.setenv(variable.name, text)
        try:
            settings = cls()
        except ValidationError as refused:
            assert refused.errors()[0]["loc"] == variable.path, variable.name
        else:
            for field in variable.path:
                settings = getattr(settings, field)
            assert settings == value, variable.name
        clean_env.delenv(variable.name)
        checked += 1
    assert checked >= 8


@pytest.mark.parametrize(
    "settings_class", ["services.controller.settings:ControllerSettings", "services.replica.settings:AgentSettings"]
)
def test_a_bare_run_dir_or_state_url_in_the_environment_is_not_read(settings_class, monkeypatch, tmp_path):
    module, name = settings_class.split(":")
    cls = getattr(importlib.import_module(module), name)
    monkeypatch.setenv("RUN_DIR", str(tmp_path / "stray"))
    monkeypatch.setenv("STATE_URL", "sqlite:////tmp/stray.db")
    monkeypatch.delenv("SERVING_RUN_DIR", raising=False)
    monkeypatch.delenv("SERVING_STATE_URL", raising=False)
    settings = cls()
    assert settings.run_dir == Path("run") and "stray" not in settings.state_url, "only the SERVING_ names are read"
    monkeypatch.setenv("SERVING_RUN_DIR", str(tmp_path / "mine"))
    assert cls().run_dir == tmp_path / "mine"
    assert cls(run_dir=tmp_path / "given").run_dir == tmp_path / "given", "set by name in code"

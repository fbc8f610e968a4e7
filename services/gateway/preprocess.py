"""clearml-serving's preprocessing contract: a Python file defining `class Preprocess` with any of

    load(local_file_name)                                   -> model object (custom engine)
    preprocess(body, state, collect_custom_statistics_fn)   -> data for the engine
    process(data, state, collect_custom_statistics_fn)      -> model output (custom engine)
    postprocess(data, state, collect_custom_statistics_fn)  -> JSON-able dict

each sync or async, called as clearml-serving calls them: one instance per worker, a fresh `state` dict per request,
`self.model_endpoint` set to the endpoint's configuration, `self.send_request(endpoint, version, data)` calling
another endpoint of this gateway.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from services.common.errors import ConfigurationError


def load_preprocess_class(path: Path) -> type:
    path = Path(path)
    if not path.is_file():
        raise ConfigurationError(f"preprocess file {path} does not exist")
    module_name = "preprocess_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise ConfigurationError(f"preprocess file {path} failed to import: {exc}") from exc
    if not hasattr(module, "Preprocess"):
        raise ConfigurationError(f"preprocess file {path} defines no class Preprocess")
    return module.Preprocess


class UserPreprocess:
    """One user Preprocess instance and how to call each of its methods."""

    def __init__(self, path: Path, endpoint_config: Any, *, model_file: str | None, serving_url: str):
        cls = load_preprocess_class(path)
        self.serving_url = serving_url.rstrip("/")
        cls.send_request = _send_request_factory(self.serving_url)
        try:
            self.instance = cls()
            self.instance.model_endpoint = endpoint_config
            self.model = None
            if callable(getattr(self.instance, "load", None)):
                self.model = self.instance.load(model_file)
        except Exception as exc:
            raise ConfigurationError(f"preprocess file {path}: Preprocess() or its load() failed: {exc}") from exc

    def has(self, method: str) -> bool:
        return callable(getattr(self.instance, method, None))

    async def call(self, method: str, data: Any, state: dict, collect: Callable[[dict], None]) -> Any:
        function = getattr(self.instance, method)
        result = function(data, state, collect)
        if inspect.isawaitable(result):
            result = await result
        return result


def _send_request_factory(serving_url: str):
    def send_request(_self, endpoint: str, version: str | None = None, data: dict | None = None) -> dict | None:
        path = f"{endpoint.strip('/')}/{version.strip('/')}" if version else endpoint.strip("/")
        response = httpx.post(f"{serving_url}/{path}", json=data, timeout=60)
        return response.json() if response.is_success else None

    return send_request

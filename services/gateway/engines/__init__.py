"""clearml-serving's engines: what a configured endpoint runs between its preprocess and postprocess, and which of
the user's Preprocess methods each one calls (clearml-serving's `serving/preprocess_service.py` is the reference).
One module per engine family, each engine one `Engine` with its one-line summary (which `serving endpoints add
--help` and the CLI reference print); the endpoint file's `engine` field takes the names of
`services.gateway.engine_names`, each of which is registered here.

Every engine calls the user's `preprocess` and `postprocess` when the class has them (else the data passes
through). Adding an engine: its name in `engine_names`, a module with its `Engine` subclass, and one entry below.
"""

from __future__ import annotations

from typing import Any

from services.common.errors import ConfigurationError
from services.gateway.engine_names import NAMES
from services.gateway.engines.base import Engine, Loading, Step
from services.gateway.engines.custom import CUSTOM, CUSTOM_ASYNC
from services.gateway.engines.models import LightGBMEngine, ModelEngine, SklearnEngine, XGBoostEngine
from services.gateway.engines.onnxruntime import OnnxRuntimeEngine
from services.gateway.engines.triton import TritonEngine

__all__ = ["ENGINES", "NAMES", "Engine", "Loading", "ModelEngine", "Step", "get", "load_model", "missing"]

ENGINES: dict[str, Engine] = {
    engine.name: engine
    for engine in (
        TritonEngine(),
        OnnxRuntimeEngine(),
        CUSTOM,
        CUSTOM_ASYNC,
        SklearnEngine(),
        XGBoostEngine(),
        LightGBMEngine(),
    )
}
"""Every engine by name, in the order of `engine_names.NAMES` (a unit test holds them equal)."""


def get(name: str) -> Engine:
    """The engine called `name`; ConfigurationError naming the engines there are."""
    try:
        return ENGINES[name]
    except KeyError:
        raise ConfigurationError(f"engine '{name}' is not one of {', '.join(NAMES)}") from None


def missing(name: str) -> str | None:
    """Why engine `name` cannot run in this environment (its library is not installed), with the extra to install;
    None when it can."""
    return get(name).missing()


def load_model(name: str, model_file: str | None, unpickle: bool = True) -> Any:
    """The model of model engine `name`, read from `model_file` with the library's own loader (`models`)."""
    engine = get(name)
    if not isinstance(engine, ModelEngine):
        raise ConfigurationError(f"engine '{name}' loads no model file")
    return engine.load_model(model_file, unpickle)

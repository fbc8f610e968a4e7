"""clearml-serving's engines: what a configured endpoint runs between its preprocess and postprocess, and which of
the user's Preprocess methods each one calls (clearml-serving's `serving/preprocess_service.py` is the reference).
One module per engine family, each engine one registered `Engine`; the endpoint file's `engine` field is checked
against this registry.

| engine         | its step                                                                                 |
|----------------|------------------------------------------------------------------------------------------|
| `triton`       | the declared tensors to a Triton model over gRPC; an `async def process` replaces it      |
| `onnxruntime`  | the declared tensors through an exported model in-process (this project's own engine)    |
| `custom`       | the user's `process` (sync, or async)                                                     |
| `custom_async` | the user's `process`; `send_request` returns an awaitable in async code                  |
| `sklearn`      | `model.predict(data)`: a skops file, or `joblib.load(model file)`, or `load()`'s model  |
| `xgboost`      | `model.predict(data)`: `xgboost.Booster().load_model(model file)`, or `load()`'s model  |
| `lightgbm`     | `model.predict(data)`: `lightgbm.Booster(model_file=...)`, or `load()`'s model           |

Every engine calls the user's `preprocess` and `postprocess` when the class has them (else the data passes
through). Adding an engine: a module with its `Engine` subclass, and one `register` call below.
"""

from __future__ import annotations

from typing import Any

from services.common.errors import ConfigurationError
from services.gateway.engines.base import Engine, Loaded
from services.gateway.engines.custom import CUSTOM, CUSTOM_ASYNC
from services.gateway.engines.models import LightGBMEngine, ModelEngine, SklearnEngine, XGBoostEngine
from services.gateway.engines.onnxruntime import OnnxRuntimeEngine
from services.gateway.engines.triton import TritonEngine

__all__ = ["ENGINES", "NAMES", "Engine", "Loaded", "ModelEngine", "get", "load_model", "missing", "register"]

ENGINES: dict[str, Engine] = {}
"""Every engine by name, in the order `--engine` lists them."""


def register(engine: Engine) -> None:
    ENGINES[engine.name] = engine


for _engine in (
    TritonEngine(),
    OnnxRuntimeEngine(),
    CUSTOM,
    CUSTOM_ASYNC,
    SklearnEngine(),
    XGBoostEngine(),
    LightGBMEngine(),
):
    register(_engine)
NAMES = tuple(ENGINES)


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

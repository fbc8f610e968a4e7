"""clearml-serving's engines: what a configured endpoint runs between its preprocess and postprocess, and which of
the user's Preprocess methods each one calls (clearml-serving's `serving/preprocess_service.py` is the reference).

| engine         | process step                                                                              |
|----------------|-------------------------------------------------------------------------------------------|
| `triton`       | the declared tensors to a Triton model over gRPC; an `async def process` replaces it       |
| `onnxruntime`  | the declared tensors through an exported model in-process (this project's own engine)     |
| `custom`       | the user's `process` (sync, or async)                                                      |
| `custom_async` | the user's `process`; `send_request` returns an awaitable in async code                   |
| `sklearn`      | `model.predict(data)`: a skops file, or `joblib.load(model file)`, or `load()`'s model   |
| `xgboost`      | `model.predict(data)`: `xgboost.Booster().load_model(model file)`, or `load()`'s model   |
| `lightgbm`     | `model.predict(data)`: `lightgbm.Booster(model_file=...)`, or `load()`'s model            |

Every engine calls the user's `preprocess` and `postprocess` when the class has them (else the data passes
through). The model engines never call a user `process`. clearml-serving's Triton engine awaits a user `process` when
the class has one: only an `async def process` can run there, so only that one replaces the Triton call here (a sync
`process`, such as the preprocess template's pass-through, is not called and the request goes to Triton).
The ML libraries are optional extras (`pip install 'transformer-serving[sklearn]'`, ...): `missing` names the one to
install. `model_files` reads the model files, and says which of them run code when loaded.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any

from services.common.errors import ConfigurationError
from services.gateway import model_files


@dataclass(frozen=True)
class Engine:
    name: str
    stage: str
    """The stage its process step is timed under in `serving_stage_duration_seconds`."""
    user_process: str
    """Whether it calls the user's `process`: "always", "async" (only an async one, as an override) or "never"."""
    tensors: bool = False
    """The process step sends the declared input tensors to a model (declare `--input`/`--output`)."""
    module: str | None = None
    """The library the engine loads models with (an optional extra of the same name)."""
    extra: str | None = None


ENGINES: dict[str, Engine] = {
    engine.name: engine
    for engine in (
        Engine("triton", "triton", "async", tensors=True),
        Engine("onnxruntime", "inference", "async", tensors=True),
        Engine("custom", "inference", "always"),
        Engine("custom_async", "inference", "always"),
        Engine("sklearn", "inference", "never", module="skops", extra="sklearn"),
        Engine("xgboost", "inference", "never", module="xgboost", extra="xgboost"),
        Engine("lightgbm", "inference", "never", module="lightgbm", extra="lightgbm"),
    )
}
NAMES = tuple(ENGINES)


def missing(engine: str) -> str | None:
    """Why `engine` cannot run in this environment (its library is not installed), with the extra to install;
    None when it can."""
    spec = ENGINES[engine]
    if spec.module is None or importlib.util.find_spec(spec.module) is not None:
        return None
    return (
        f"engine '{engine}' needs the {spec.extra} library, which is not installed: "
        f"pip install 'transformer-serving[{spec.extra}]' (`make setup` installs every engine)"
    )


def load_model(engine: str, model_file: str | None, unpickle: bool = True) -> Any:
    """The model of a model engine, loaded from `model_file` with the library's own loader, as clearml-serving does
    (`model_files`); None for a pickle when `unpickle` is False: checked, not loaded (its loading runs code)."""
    if problem := missing(engine):
        raise ConfigurationError(problem)
    if not model_file:
        raise ConfigurationError(
            f"engine '{engine}' needs a model file (`--model-file PATH`), or a Preprocess.load() that returns the model"
        )
    try:
        return model_files.load(engine, model_file, unpickle)
    except ConfigurationError:
        raise
    except Exception as exc:  # noqa: BLE001 - each library fails in its own way; say which file and why
        raise ConfigurationError(
            f"engine '{engine}' cannot load model file {model_file}: {_first_line(exc)}; "
            f"it reads {model_files.FORMATS[engine]}"
        ) from None


PREDICTS_ON = {
    "sklearn": "rows (a list of lists or a numpy array)",
    "xgboost": "an xgboost.DMatrix (build it in preprocess: xgboost.DMatrix(rows))",
    "lightgbm": "rows (a list of lists or a numpy array)",
}
"""What each model engine's predict takes, said when preprocess returned something else."""


def _first_line(exc: Exception) -> str:
    """The library's own reason, without the backtrace a native library appends (xgboost's C++ stack)."""
    lines = str(exc).strip().splitlines()
    reason = lines[0][:300] if lines else ""
    return f"{type(exc).__name__}: {reason}" if reason else type(exc).__name__

"""The model engines, `sklearn`, `xgboost` and `lightgbm`: the model's `predict` on the preprocess output, on a
thread of the endpoint's own (the event loop serves on). The model is what the user's `Preprocess.load()` returned,
else the model file read with the library's own loader, as clearml-serving does (`services.gateway.model_files`).
They never call a user `process`. Each library is an optional extra of the same name: `missing` names the one to
install."""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from services.common.errors import ConfigurationError, InvalidInput
from services.gateway import model_files
from services.gateway.engine_names import EngineName
from services.gateway.engines.base import Engine, Loading, Step
from services.gateway.user_errors import describe, not_users


@dataclass(frozen=True)
class ModelEngine(Engine):
    user_process: Literal["always", "async", "never"] = "never"
    module: str = ""
    """The library the engine loads models with (an optional extra: `extra`)."""
    extra: str = ""
    reads: str = ""
    """What its loader reads, said when it cannot load a file."""
    predicts_on: str = "rows (a list of lists or a numpy array)"
    """What its model's predict takes, said when preprocess returned something else."""

    def missing(self) -> str | None:
        if importlib.util.find_spec(self.module) is not None:
            return None
        return (
            f"engine '{self.name}' needs the {self.extra} library, which is not installed: "
            f"pip install 'transformer-serving[{self.extra}]' (`make setup` installs every engine)"
        )

    def load(self, loading: Loading) -> Step:
        code, model_file, unpickle = loading.code, loading.model_file, loading.unpickle
        own = code.model if code is not None else None
        model = own if own is not None else self.load_model(model_file, unpickle)
        if not callable(getattr(model, "predict", None)) and (unpickle or model is not None):  # None: not unpickled
            where = "Preprocess.load() returned" if own is not None else f"{model_file} holds"
            raise ConfigurationError(
                f"endpoint '{loading.name}': {where} a {type(model).__name__}, which has no predict(): engine "
                f"'{self.name}' needs a model (for sklearn, e.g. a fitted estimator saved with skops.io.dump)"
            )
        return self.step(loading, model)

    def load_model(self, model_file: str | None, unpickle: bool = True) -> Any:
        """The model in `model_file`, read with the library's own loader; None for a pickle when `unpickle` is False:
        checked, not loaded (its loading runs code)."""
        if problem := self.missing():
            raise ConfigurationError(problem)
        if not model_file:
            raise ConfigurationError(
                f"engine '{self.name}' needs a model file (`--model-file PATH`), or a Preprocess.load() that returns "
                "the model"
            )
        try:
            return self.read(model_file, unpickle)
        except ConfigurationError:
            raise
        except Exception as exc:  # noqa: BLE001 - each library fails in its own way; say which file and why
            raise ConfigurationError(
                f"engine '{self.name}' cannot load model file {model_file}: {_first_line(exc)}; it reads {self.reads}"
            ) from None

    def read(self, path: str, unpickle: bool) -> Any:
        """The model in `path`, read by the library (its own exceptions when it cannot)."""
        raise NotImplementedError

    def step(self, loading: Loading, model: Any) -> Step:
        """The step: `model.predict` on the preprocess output, on one of the worker's threads."""
        name, threads = loading.name, loading.threads

        async def step(data: Any) -> Any:
            if isinstance(data, str | bytes | Path):  # xgboost and lightgbm would read a path on this server
                raise InvalidInput(
                    f"preprocess of endpoint '{name}' returned a {type(data).__name__}: the {self.name} "
                    f"model predicts on {self.predicts_on}",
                    param="preprocess",
                )
            try:
                return await threads.run(model.predict, data)
            except BaseException as exc:  # noqa: BLE001 - the library (or a model of the user's) refuses: a 422
                if not_users(exc):
                    raise
                raise InvalidInput(
                    f"the {self.name} model of endpoint '{name}' cannot predict on the preprocess output: "
                    f"{describe(exc)}",
                    param="process",
                ) from None

        return step


@dataclass(frozen=True)
class SklearnEngine(ModelEngine):
    name: EngineName = "sklearn"
    summary: str = "`model.predict(data)`: a skops file, or `joblib.load(model file)`, or `load()`'s model"
    module: str = "skops"
    extra: str = "sklearn"
    reads: str = "a model saved with skops.io.dump (.skops), or joblib.dump / pickle.dump (these run code when loaded)"

    def read(self, path: str, unpickle: bool) -> Any:
        return model_files.load_sklearn(path, unpickle)

    def runs_code(self, path: str | Path) -> bool:
        return model_files.is_pickle(path)


@dataclass(frozen=True)
class XGBoostEngine(ModelEngine):
    name: EngineName = "xgboost"
    summary: str = "`model.predict(data)`: `xgboost.Booster().load_model(model file)`, or `load()`'s model"
    module: str = "xgboost"
    extra: str = "xgboost"
    reads: str = "a model saved with Booster.save_model / XGBModel.save_model (.json or .ubj)"
    predicts_on: str = "an xgboost.DMatrix (build it in preprocess: xgboost.DMatrix(rows))"

    def read(self, path: str, unpickle: bool) -> Any:
        booster = importlib.import_module("xgboost").Booster()
        booster.load_model(path)
        return booster


@dataclass(frozen=True)
class LightGBMEngine(ModelEngine):
    name: EngineName = "lightgbm"
    summary: str = "`model.predict(data)`: `lightgbm.Booster(model_file=...)`, or `load()`'s model"
    module: str = "lightgbm"
    extra: str = "lightgbm"
    reads: str = "a model saved with Booster.save_model (its text format)"

    def read(self, path: str, unpickle: bool) -> Any:
        return importlib.import_module("lightgbm").Booster(model_file=path)


def _first_line(exc: Exception) -> str:
    """The library's own reason, without the backtrace a native library appends (xgboost's C++ stack)."""
    lines = str(exc).strip().splitlines()
    reason = lines[0][:300] if lines else ""
    return f"{type(exc).__name__}: {reason}" if reason else type(exc).__name__

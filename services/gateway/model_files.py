"""The model engines' model files (`services.gateway.engines.models`): which of them run code when loaded, and the
sklearn engine's reader.

| engine     | the file                                 | read with                                  | runs code |
|------------|------------------------------------------|--------------------------------------------|-----------|
| `sklearn`  | skops (`skops.io.dump`: a zip)           | `skops.io.load`, skops' trusted types only | no        |
| `sklearn`  | joblib or pickle (anything else)         | `joblib.load`, as clearml-serving          | yes       |
| `xgboost`  | XGBoost's JSON or UBJSON                 | `xgboost.Booster().load_model`             | no        |
| `lightgbm` | LightGBM's text model                    | `lightgbm.Booster(model_file=...)`         | no        |

A pickle is recognised by its first bytes (a pickle protocol header, or a compression joblib writes), so it can be
checked without loading it (`unpickle=False`: the CLI checks an endpoint so, the gateway's workers load it).
"""

from __future__ import annotations

import importlib
import importlib.abc
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from services.common.errors import ConfigurationError

ZIP = b"PK\x03\x04"
"""A skops file is a zip archive."""
PICKLE_STARTS = (
    *(b"\x80" + bytes([protocol]) for protocol in range(2, 6)),  # pickle.dump, joblib.dump without compression
    b"x",  # joblib's zlib (its default compress=N)
    b"\x1f\x8b",  # gzip
    b"BZ",  # bz2
    b"\xfd7zXZ",  # xz
    b"]\x00",  # lzma
    b'\x04"M\x18',  # lz4
    b"ZF",  # joblib's old compressed files
)
"""The first bytes of what joblib.load reads (joblib's own list of compressions, `joblib.compressor`)."""


def is_skops(path: str | Path) -> bool:
    return Path(path).suffix == ".skops" or _head(path).startswith(ZIP)


def is_pickle(path: str | Path) -> bool:
    """`path` is a joblib or pickle file (by its first bytes), whose loading runs code its author put in it."""
    return Path(path).is_file() and _head(path).startswith(PICKLE_STARTS) and not is_skops(path)


def runs_code_warning(path: str) -> str:
    return (
        f"{path} is a pickle (joblib) file, and loading a pickle runs code: whatever its author put in it. The "
        "gateway's workers load it (this command did not): serve only files you trust, and save scikit-learn models "
        "with skops instead (skops.io.dump(model, 'model.skops')), which the sklearn engine loads without running code"
    )


def load_sklearn(path: str, unpickle: bool = True) -> Any:
    """The scikit-learn model in `path`: a skops file read with skops' trusted types only, or a joblib/pickle file
    with `joblib.load` (None when `unpickle` is False: checked by its first bytes, not loaded). Exceptions are the
    library's own, or ConfigurationError with the fix."""
    if is_skops(path):
        return _skops(path)
    if not _head(path).startswith(PICKLE_STARTS):
        raise ValueError("neither a skops file nor a joblib or pickle file")
    return importlib.import_module("joblib").load(filename=path) if unpickle else None


def _skops(path: str) -> Any:
    """The object in a skops file, built from skops' trusted types only: a file with any other type is refused,
    naming the types (skops leaves them out for a reason: a crafted tree, for one, crashes the worker at predict)."""
    sio = skops_io()
    untrusted_found = importlib.import_module("skops.io.exceptions").UntrustedTypesFoundException
    try:
        return sio.load(path)
    except untrusted_found:
        untrusted = ", ".join(sorted(sio.get_untrusted_types(file=path)))
        raise ConfigurationError(
            f"engine 'sklearn' refuses model file {path}: it holds types skops does not trust ({untrusted}), whose "
            "loading or use can run code or crash the worker; save a model of skops' trusted types, or, for a file "
            "you made yourself, return skops.io.load(local_file_name, trusted=[...]) from your Preprocess.load()"
        ) from None


def skops_io() -> Any:
    """`skops.io`, imported without `TORCH_ADAPTER`."""
    with _without(TORCH_ADAPTER):
        return importlib.import_module("skops.io")


TORCH_ADAPTER = "sklearn.externals.array_api_compat.torch"
"""Imported (and torch with it, where installed) when skops' trusted types walk every scikit-learn module at its
import; a model engine never gets a torch array (it predicts on numpy), and a serving process never imports torch."""


@contextmanager
def _without(module: str) -> Iterator[None]:
    """`module` cannot be imported meanwhile (a module walk skips what fails to import)."""

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == module:
                raise ModuleNotFoundError(f"{module} is not imported by a model engine", name=name)
            return None

    finder = Refuse()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def _head(path: str | Path) -> bytes:
    """The first bytes of `path` (OSError when it cannot be read, the reason the loaders give too)."""
    with open(path, "rb") as file:
        return file.read(8)

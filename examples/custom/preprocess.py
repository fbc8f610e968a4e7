"""The custom engine: the gateway calls every method of this class and nothing else,

    load(model file) once, then per request: preprocess(body) -> process(data) -> postprocess(result)

so the model is whatever `load` makes of the file and `process` runs it however it likes: here a scikit-learn
forest asked for class probabilities (`predict_proba`), which the sklearn engine (it calls `predict`) would not give.
"""

from collections.abc import Callable
from typing import Any

import numpy as np
import skops.io


# the gateway looks for a class with exactly this name
class Preprocess:
    def __init__(self):
        # runs once per worker, never per request; instances are shared by the worker's concurrent requests,
        # so keep per-request data in `state`, not on self
        self._model = None

    def load(self, local_file_name: str) -> Any | None:
        # `local_file_name` is the endpoint's --model-file; load it the way this model needs. skops builds only the
        # types it trusts, and a forest's trees are not among them (a crafted tree can crash the worker when it
        # predicts): trust that one type here, for a file you made yourself
        self._model = skops.io.load(local_file_name, trusted=["sklearn.tree._tree.Tree"])
        return None  # the custom engine does not use a returned model: process() below runs it

    def preprocess(self, body: dict, state: dict, collect_custom_statistics_fn=None) -> Any:
        # one sample per request: its three features as a list
        features = body.get("features")
        if not isinstance(features, list) or len(features) != 3:
            raise ValueError('send "features": a list of 3 numbers')
        return np.asarray(features, dtype=np.float64)

    def process(self, data: Any, state: dict, collect_custom_statistics_fn: Callable[[dict], None] | None) -> Any:
        # the heavy lifting, on a worker thread: the worker keeps serving other requests meanwhile
        return self._model.predict_proba(np.atleast_2d(data))

    def postprocess(self, data: Any, state: dict, collect_custom_statistics_fn=None) -> dict:
        # `data` is what process returned: per row, the probability of each class
        return dict(y=data.argmax(axis=1).tolist(), probability=data.max(axis=1).round(3).tolist())

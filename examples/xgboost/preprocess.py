"""The xgboost engine: the gateway loads the model file with `xgboost.Booster().load_model` and runs

    preprocess(body) -> booster.predict(DMatrix) -> postprocess(probabilities)

A Booster predicts on a DMatrix, so preprocess builds one."""

from typing import Any

import numpy as np
import xgboost as xgb


# the gateway looks for a class with exactly this name
class Preprocess:
    def __init__(self):
        # runs once per worker when the endpoint is loaded, never per request
        pass

    def preprocess(self, body: dict, state: dict, collect_custom_statistics_fn=None) -> Any:
        # one flower per request: sepal length and width, petal length and width (cm), sent as x0..x3;
        # a Booster predicts on a DMatrix
        row = [body.get("x0"), body.get("x1"), body.get("x2"), body.get("x3")]
        wrong = [f"x{i}" for i, value in enumerate(row) if not isinstance(value, int | float)]
        if wrong:
            raise ValueError(f"send x0, x1, x2 and x3 as numbers: {', '.join(wrong)} missing or not a number")
        return xgb.DMatrix([row])

    def postprocess(self, data: Any, state: dict, collect_custom_statistics_fn=None) -> dict:
        # `data` is what booster.predict returned: per row, the probability of each of the three species;
        # answer the most likely one, and how sure the model is of it
        data = np.asarray(data)
        return dict(y=data.argmax(axis=1).tolist(), probability=data.max(axis=1).astype(float).round(3).tolist())

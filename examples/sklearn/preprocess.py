"""The sklearn engine: the gateway loads the model file with `skops.io.load` (a `.skops` file) and runs

    preprocess(body) -> model.predict(rows) -> postprocess(prediction)

so this class only turns the request into rows and the prediction into the answer."""

from typing import Any

import numpy as np


# the gateway looks for a class with exactly this name
class Preprocess:
    def __init__(self):
        # runs once per worker when the endpoint is loaded, never per request
        pass

    def preprocess(self, body: dict, state: dict, collect_custom_statistics_fn=None) -> Any:
        # one flower per request: sepal length and width, petal length and width (cm), sent as x0..x3;
        # the model wants a batch of rows
        row = [body.get("x0"), body.get("x1"), body.get("x2"), body.get("x3")]
        wrong = [f"x{i}" for i, value in enumerate(row) if not isinstance(value, int | float)]
        if wrong:
            raise ValueError(f"send x0, x1, x2 and x3 as numbers: {', '.join(wrong)} missing or not a number")
        return [row]

    def postprocess(self, data: Any, state: dict, collect_custom_statistics_fn=None) -> dict:
        # `data` is what model.predict returned: one predicted species (0, 1 or 2) per row
        return dict(y=data.tolist() if isinstance(data, np.ndarray) else data)

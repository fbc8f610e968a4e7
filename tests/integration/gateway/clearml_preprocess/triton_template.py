import numpy as np


class Preprocess:
    def preprocess(self, body, state, collect_custom_statistics_fn=None):
        ids = np.array([body["ids"]], dtype=np.int64)
        return [ids, np.ones_like(ids), np.zeros_like(ids)]

    def process(self, data, state, collect_custom_statistics_fn=None):
        state["process"] = True  # clearml-serving's template pass-through: the triton engine never calls it
        return data

    def postprocess(self, data, state, collect_custom_statistics_fn=None):
        return {"shape": list(data.shape), "process_called": state.get("process", False)}

import numpy as np


class Preprocess:
    def preprocess(self, body, state, collect_custom_statistics_fn=None):
        if body.get("fail") == "preprocess":
            raise ValueError("bad input")
        return body

    def process(self, data, state, collect_custom_statistics_fn=None):
        if data.get("fail") == "process":
            raise RuntimeError("model exploded")
        return data

    def postprocess(self, data, state, collect_custom_statistics_fn=None):
        if data.get("fail") == "postprocess":
            return {"broken": object()}
        matrix = np.arange(6, dtype=np.float32).reshape(2, 3)
        return {
            "scalar": np.float32(1.5),
            "count": np.int64(3),
            7: "int key",
            "column": matrix[:, 1],
            "endpoint": [
                self.model_endpoint.engine_type,
                self.model_endpoint.serving_url,
                self.model_endpoint.model_id,
                self.model_endpoint.version,
            ],
        }

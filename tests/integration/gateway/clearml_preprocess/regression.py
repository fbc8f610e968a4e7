class Preprocess:
    def preprocess(self, body, state, collect_custom_statistics_fn=None):
        return [[body["x"]]]

    def process(self, data, state, collect_custom_statistics_fn=None):
        raise RuntimeError("a model engine never calls the user's process")

    def postprocess(self, data, state, collect_custom_statistics_fn=None):
        return {"y": data}

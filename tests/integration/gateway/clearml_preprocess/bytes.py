class Preprocess(object):  # noqa: UP004 - as clearml-serving users write it
    def preprocess(self, body, state, collect_custom_statistics_fn=None):
        return {"kind": type(body).__name__, "size": len(body)}

    def process(self, data, state, collect_custom_statistics_fn=None):
        return data

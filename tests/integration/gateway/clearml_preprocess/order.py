class Preprocess:
    def __init__(self):
        self.requests = 0

    def preprocess(self, body, state, collect_custom_statistics_fn=None):
        self.requests += 1
        state["seen"], state["order"] = sorted(state), ["preprocess"]
        collect_custom_statistics_fn({"requests": self.requests})
        return body

    async def process(self, data, state, collect_custom_statistics_fn=None):
        state["order"].append("process")
        return data

    def postprocess(self, data, state, collect_custom_statistics_fn=None):
        state["order"].append("postprocess")
        return {"order": state["order"], "state_at_preprocess": state["seen"], "requests": self.requests}

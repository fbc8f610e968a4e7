class Preprocess:
    def process(self, data, state, collect_custom_statistics_fn=None):
        return {"via_sync": self.send_request("stages", version=None, data={})["scalar"]}

class Preprocess:
    async def preprocess(self, body, state, collect_custom_statistics_fn=None):
        return body

    async def process(self, data, state, collect_custom_statistics_fn=None):
        pending = self.send_request("stages", data={"x": 1})  # an awaitable in async code, already started
        first = await pending
        return {"from_stages": first["count"], "x": data["x"]}

class Preprocess:
    async def process(self, data, state, collect_custom_statistics_fn=None):
        first = self.send_request("gate", data={"dir": data["dir"], "i": 1})
        second = self.send_request("gate", data={"dir": data["dir"], "i": 2})
        return {"answers": [await first, await second]}

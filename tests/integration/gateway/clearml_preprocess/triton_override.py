class Preprocess:
    async def process(self, data, state, collect_custom_statistics_fn=None):
        return {"override": data}

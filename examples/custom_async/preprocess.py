"""The custom_async engine: a pipeline of endpoints, run on the gateway's event loop. Every method is `async`;
`process` asks two other endpoints at once and waits for both:

    preprocess(body) -> process: send_request(iris-sklearn), send_request(iris-xgboost), await both -> postprocess

In async code `self.send_request(endpoint, version, data)` returns an awaitable that is already running: make both
requests before awaiting either, and they are answered side by side. Each answer is the other endpoint's JSON,
or None when it answered an error.
"""

from typing import Any

ENDPOINTS = ("/iris-sklearn/", "/iris-xgboost/")  # the sklearn and xgboost examples (see README.md)


# the gateway looks for a class with exactly this name
class Preprocess:
    def __init__(self):
        # runs once per worker, never per request
        pass

    async def preprocess(self, body: dict, state: dict, collect_custom_statistics_fn=None) -> Any:
        # pass the request on as it came: the endpoints behind this one check it
        return body

    async def process(self, data: Any, state: dict, collect_custom_statistics_fn=None) -> Any:
        # start both requests first (no await yet): they run at the same time
        first = self.send_request(endpoint=ENDPOINTS[0], version=None, data=data)
        second = self.send_request(endpoint=ENDPOINTS[1], version=None, data=data)
        answers = [await first, await second]
        failed = [endpoint for endpoint, answer in zip(ENDPOINTS, answers, strict=True) if answer is None]
        if failed:
            raise ValueError(f"endpoint {', '.join(failed)} answered an error (call it directly to see why)")
        return answers

    async def postprocess(self, data: list[dict], state: dict, collect_custom_statistics_fn=None) -> dict:
        # one prediction per model, in the order of ENDPOINTS
        return dict(y=[answer["y"][0] for answer in data])

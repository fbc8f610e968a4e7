"""Traffic for a fleet's gateway hosts: client threads posting texts to every gateway in turn, each answer kept with
when it was sent and received (wall clock, to set beside the state's and Prometheus' times), which gateway answered,
its status and the version that answered it (`x-model-version`)."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class Answer:
    sent: float
    received: float
    gateway: int
    """Index into the Load's gateway URLs."""
    code: int
    """HTTP status; -1: no answer (connection refused or reset, timeout)."""
    version: str | None


class Load:
    """`clients` threads, each sending to the gateways in turn and pausing `pause` seconds between two requests, until
    the `with` block ends or, given `requests`, that many were sent (`wait()`)."""

    def __init__(
        self,
        urls: list[str],
        texts: list[str],
        *,
        endpoint: str,
        clients: int = 8,
        pause: float = 0.02,
        requests: int | None = None,
    ):
        self.urls, self.texts, self.path, self.pause = urls, texts, f"/serve/{endpoint}", pause
        self.answers: list[Answer] = []
        self.stopped = threading.Event()
        self.numbers = itertools.count()
        self.requests = requests
        self.threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(clients)]

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.wait()

    def run(self) -> Load:
        """Send the `requests` and wait for their answers."""
        self.__enter__()
        return self.wait()

    def wait(self) -> Load:
        for thread in self.threads:
            thread.join()
        return self

    def _client(self, index: int) -> None:
        clients = [httpx.Client(base_url=url, timeout=30) for url in self.urls]
        try:
            for turn in itertools.count(index):
                number = next(self.numbers)
                if self.stopped.is_set() or (self.requests is not None and number >= self.requests):
                    return
                gateway = turn % len(clients)
                sent = time.time()
                try:
                    answer = clients[gateway].post(self.path, json={"text": self.texts[number % len(self.texts)]})
                    code, version = answer.status_code, answer.headers.get("x-model-version")
                except httpx.HTTPError:
                    code, version = -1, None
                self.answers.append(Answer(sent, time.time(), gateway, code, version))
                if self.pause:
                    time.sleep(self.pause)
        finally:
            for client in clients:
                client.close()

    def failed(self) -> list[Answer]:
        return [answer for answer in self.answers if answer.code != 200]

    def versions(self, gateway: int | None = None) -> Counter:
        """Successful answers by version (of one gateway, or of all)."""
        return Counter(a.version for a in self.answers if a.code == 200 and gateway in (None, a.gateway))

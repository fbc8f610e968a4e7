"""The real all-MiniLM-L6-v2 export, served by STACK=fastapi: equal to PyTorch, and SIGTERM drains."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from services.launcher.groups import group_alive
from services.modelbuild.checkpoint import default_checkpoint_dir
from tests.support.servers import start_http_stack

pytestmark = pytest.mark.slow

SENTENCES = ["hello world", "A man is eating food.", "Triton groups requests into batches."]


def pytorch_embeddings(texts: list[str]) -> np.ndarray:
    """sentence-transformers' recipe written out: BERT, mean pooling over the mask, L2 normalisation."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    path = default_checkpoint_dir()
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model = AutoModel.from_pretrained(str(path), local_files_only=True).eval()
    encoded = tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**encoded).last_hidden_state
    mask = encoded["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=1).numpy()


@pytest.fixture(scope="module")
def real_server(tmp_path_factory, real_model):
    server = start_http_stack(tmp_path_factory.mktemp("real"), real_model, workers=2)
    yield server
    server.launcher.stop_all()


def test_real_model_matches_pytorch(real_server):
    with real_server.client() as client:
        one = client.post("/serve/minilm", json={"text": SENTENCES[0]}).json()
        many = client.post("/serve/minilm", json={"texts": SENTENCES}).json()
    expected = pytorch_embeddings(SENTENCES)
    assert one["model"] == "all-MiniLM-L6-v2" and len(one["embedding"]) == 384
    assert abs(np.linalg.norm(one["embedding"]) - 1) < 1e-5
    assert np.abs(np.array(one["embedding"]) - expected[0]).max() <= 1e-4
    assert np.abs(np.array(many["embeddings"]) - expected).max() <= 1e-4


def test_long_texts_truncate_at_256_not_128(real_server):
    with real_server.client() as client:
        body = client.post("/serve/minilm", json={"text": " ".join(["word"] * 400)}).json()
    assert body["tokens"] == 256 and body["truncated"] is True


def test_sigterm_drains_in_flight_requests(tmp_path, real_model):
    # a token budget for all four requests in one worker (gunicorn may hand them all to one): drained, not shed
    server = start_http_stack(tmp_path, real_model, workers=2, env={"SERVING_MAX_CONCURRENT_TOKENS": "131072"})
    pid = server.pid
    # 48 texts of 256 tokens: each request takes a few seconds on 2 cores (16 took under one on a quiet host); all four
    # finish well inside gunicorn's 30 s graceful timeout even on one worker of a busy host
    texts = [" ".join(["serving"] * 300)] * 48
    # connected and accepted before the clock starts: a request not yet accepted when the listener closes is refused
    clients = [httpx.Client(base_url=server.url, timeout=60) for _ in range(4)]

    def post(client: httpx.Client) -> int:
        return client.post("/serve/minilm", json={"texts": texts}).status_code

    try:
        for client in clients:
            assert client.get("/health/ready").status_code == 200
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(post, client) for client in clients]
            time.sleep(1.0)
            assert not any(f.done() for f in futures), "requests finished before SIGTERM: nothing tested"
            os.killpg(pid, signal.SIGTERM)
            codes = [f.result() for f in futures]
        assert codes == [200] * 4
    finally:
        for client in clients:
            client.close()
        server.launcher.stop_all()
    assert not group_alive(pid), "no process of the stack runs (a zombie waiting for PID 1 to reap it holds nothing)"

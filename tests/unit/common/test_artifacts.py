"""A version's artifact is fetched as untrusted input: its own listing only, relative paths, regular files, and size
limits that stop the copy at the limit; a refused fetch leaves nothing behind. The proxy is a real HTTP server."""

import http.server
import json
import os
import threading
from pathlib import Path

import pytest

from services.common.artifacts import (
    ArtifactFile,
    ArtifactLimits,
    ArtifactRefused,
    LocalArtifacts,
    ProxiedArtifacts,
    download,
    source_for,
)
from services.common.errors import ConfigurationError

LIMITS = ArtifactLimits(max_file_bytes=1000, max_version_bytes=1500, max_files=4)


def _artifact(root: Path, files: dict[str, bytes]) -> Path:
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
    return root


def test_a_local_artifact_is_copied_whole(tmp_path):
    source = LocalArtifacts(_artifact(tmp_path / "a", {"manifest.json": b"{}", "sub/model.onnx": b"x" * 900}))
    out = download(source, tmp_path / "out", LIMITS)
    assert (out / "sub" / "model.onnx").read_bytes() == b"x" * 900 and (out / "manifest.json").read_bytes() == b"{}"


def test_a_link_in_the_artifact_is_refused_never_followed(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("outside the artifact")
    root = _artifact(tmp_path / "a", {"manifest.json": b"{}"})
    os.symlink(secret, root / "model.onnx")
    with pytest.raises(ArtifactRefused, match="model.onnx is a link or a special file"):
        download(LocalArtifacts(root), tmp_path / "out", LIMITS)
    assert not (tmp_path / "out").exists()


def test_a_special_file_is_refused(tmp_path):
    root = _artifact(tmp_path / "a", {"manifest.json": b"{}"})
    os.mkfifo(root / "model.onnx")
    with pytest.raises(ArtifactRefused, match="link or a special file"):
        download(LocalArtifacts(root), tmp_path / "out", LIMITS)


def test_limits_from_the_listing_refuse_before_copying(tmp_path):
    root = _artifact(tmp_path / "a", {"a": b"x" * 800, "b": b"x" * 800})
    with pytest.raises(ArtifactRefused, match="over the limit of 1500 bytes"):
        download(LocalArtifacts(root), tmp_path / "out", LIMITS)
    many = _artifact(tmp_path / "m", {str(i): b"" for i in range(5)})
    with pytest.raises(ArtifactRefused, match="5 files, over the limit of 4"):
        download(LocalArtifacts(many), tmp_path / "out", LIMITS)


class _Lying:
    """A source whose listing says nothing of sizes and whose file never ends: the copy must stop itself."""

    def __init__(self):
        self.chunks_read = 0

    def listing(self):
        return [ArtifactFile("model.onnx", None)]

    def chunks(self, path):
        while True:
            self.chunks_read += 1
            yield b"x" * 100


def test_a_file_larger_than_it_says_is_stopped_at_the_limit_and_removed(tmp_path):
    source = _Lying()
    with pytest.raises(ArtifactRefused, match="model.onnx is over the limit of 1000 bytes"):
        download(source, tmp_path / "out", LIMITS)
    assert source.chunks_read == 11, "stopped at the limit, not after"
    assert not (tmp_path / "out").exists(), "nothing of a refused fetch is kept"


@pytest.mark.parametrize("path", ["../escape", "/etc/passwd", "a/../../b", ".hidden"])
def test_a_listed_path_outside_the_artifact_is_refused(tmp_path, path):
    class Listing(_Lying):
        def listing(self):
            return [ArtifactFile(path, 1)]

    with pytest.raises(ArtifactRefused, match="relative paths only"):
        download(Listing(), tmp_path / "out", LIMITS)


def test_only_listed_files_are_fetched(tmp_path):
    source = LocalArtifacts(_artifact(tmp_path / "a", {"manifest.json": b"{}"}))
    with pytest.raises(ArtifactRefused, match=r"has no \['tokenizer.json'\]"):
        download(source, tmp_path / "out", LIMITS, only=["manifest.json", "tokenizer.json"])


class _Proxy(http.server.BaseHTTPRequestHandler):
    """MLflow's artifact proxy as the client sees it: a listing that under-states a file, and a file that never ends."""

    served = 0

    def do_GET(self):  # noqa: N802 - the handler's name
        if "?" in self.path:
            body = json.dumps({"files": [{"path": "model.onnx", "is_dir": False, "file_size": 10}]}).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.end_headers()
        try:
            for _ in range(100_000):
                self.wfile.write(b"x" * 1000)
                type(self).served += 1000
        except OSError:
            pass

    def log_message(self, *args):
        pass


def test_a_proxied_file_is_stopped_at_the_limit_while_streaming(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        source = source_for("mlflow-artifacts:/1/run/artifacts", url, "model")
        assert isinstance(source, ProxiedArtifacts)
        with pytest.raises(ArtifactRefused, match="over the limit of 1000 bytes"):
            download(source, tmp_path / "out", LIMITS)
        assert not (tmp_path / "out").exists()
    finally:
        server.shutdown()
        server.server_close()
    assert _Proxy.served < 100_000_000, "the client hung up long before the file's end"


def test_an_artifact_store_that_cannot_be_limited_is_refused():
    with pytest.raises(ConfigurationError, match="--serve-artifacts"):
        source_for("s3://bucket/1/run/artifacts", "http://mlflow:5000", "model")

"""Where `loadtest attack` sends its client spans by default: the receiver of the stack started in its run directory
(SERVING_RUN_DIR), on whatever port that stack gave it, and never another run's receiver."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from loadtest.tracing import local_receiver
from services.launcher.records import STACK_INFO


class Health(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        return None


def stack(run_dir, urls: dict) -> None:
    run_dir.mkdir()
    (run_dir / STACK_INFO).write_text(json.dumps({"stack": "clearml", "urls": urls}))


def test_client_spans_go_to_the_receiver_of_the_run_directorys_stack(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
        stack(tmp_path / "traced", {"api": "http://127.0.0.1:1", "traces": url})
        stack(tmp_path / "untraced", {"api": "http://127.0.0.1:2"})
        assert local_receiver(tmp_path / "traced") == url, "its own port, not 4318"
        assert local_receiver(tmp_path / "untraced") is None, "a stack that does not trace: no other run's receiver"
    finally:
        server.shutdown()
        server.server_close()
    assert local_receiver(tmp_path / "traced") is None, "a receiver that does not answer"

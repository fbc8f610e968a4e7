"""`services.prometheus_api.PrometheusApi` against a hostile stand-in Prometheus (a real HTTP server on a loopback
port, tests/support/http_stub.py): an answer that is not JSON, not an API object, of the wrong shape, larger than the
cap or sent a byte at a time is `Unavailable` (what the controller pauses a rollout on and `serving dashboards` shows
in a panel), never another exception or a caller held for ever."""

from __future__ import annotations

import time
from http.server import BaseHTTPRequestHandler

import pytest

from services import prometheus_api
from services.common.errors import Unavailable
from services.prometheus_api import PrometheusApi
from tests.support.http_stub import send_json, serve

ANSWERS: dict[str, object] = {
    "/list": ["success"],
    "/no-data": {"status": "success"},
    "/no-result": {"status": "success", "data": {"resultType": "vector"}},
    "/bad-item": {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}},
    "/bad-labels": {"status": "success", "data": {"resultType": "vector", "result": [{"metric": 1, "value": [1, 2]}]}},
    "/bad-value": {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[1]]}]}},
    "/odd-targets": {
        "status": "success",
        "data": {
            "activeTargets": [
                7,
                {"health": "down", "labels": "x", "scrapeUrl": 3},
                {"health": "down", "labels": {"job": "api"}, "scrapeUrl": "http://h:1/m", "lastError": "refused"},
            ]
        },
    },
    "/nan": {
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": {"a": "b"}, "values": [[1, "NaN"], [2, "+Inf"]]}]},
    },
}


class Hostile(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        base = "/" + self.path.split("/")[1]
        if base in ANSWERS:
            send_json(self, 200, ANSWERS[base])
        elif base == "/html":
            self.send_response(502)
            self.send_header("Content-Length", "11")
            self.end_headers()
            self.wfile.write(b"<html>bad</")
        elif base == "/huge":
            self.send_response(200)
            self.end_headers()
            try:
                for _ in range(64):
                    self.wfile.write(b" " * 65536)
            except OSError:
                pass
        elif base == "/drip":  # a byte every 0.2 s, for ever: each read well within httpx's per-read timeout
            self.send_response(200)
            self.end_headers()
            try:
                for _ in range(300):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                pass


@pytest.fixture(scope="module")
def url():
    yield from serve(Hostile)


@pytest.mark.parametrize("path", ["/list", "/no-data", "/no-result", "/bad-item", "/bad-labels", "/html"])
def test_an_answer_that_is_no_prometheus_answer_is_unavailable(url, path):
    with pytest.raises(Unavailable, match=f"Prometheus at {url}{path}"):
        PrometheusApi(url + path).query("up", 1.0)


def test_a_malformed_matrix_is_unavailable_and_nan_and_inf_read_as_floats(url):
    with pytest.raises(Unavailable, match="malformed matrix"):
        PrometheusApi(url + "/bad-value").query_range("up", 0, 1, 1)
    (labels, points), *_ = PrometheusApi(url + "/nan").query_range("up", 0, 1, 1)
    assert labels == {"a": "b"} and points[0][1] != points[0][1] and points[1][1] == float("inf")


def test_an_answer_over_the_cap_is_unavailable(url, monkeypatch):
    monkeypatch.setattr(prometheus_api, "MAX_ANSWER_BYTES", 1 << 20)
    with pytest.raises(Unavailable, match="more than 1048576 bytes"):
        PrometheusApi(url + "/huge").query("up", 1.0)


def test_an_answer_sent_a_byte_at_a_time_is_cut_at_the_timeout(url):
    started = time.monotonic()
    with pytest.raises(Unavailable, match="did not finish its answer in 1s"):
        PrometheusApi(url + "/drip", timeout=1.0).query("up", 1.0)
    assert time.monotonic() - started < 20, "the whole answer would take 60 s"


@pytest.mark.parametrize("path", ["/list", "/no-data", "/html"])
def test_a_targets_answer_that_is_no_prometheus_answer_is_unavailable(url, path):
    with pytest.raises(Unavailable, match=f"Prometheus at {url}{path}"):
        PrometheusApi(url + path).down_targets()


def test_targets_of_odd_shapes_are_left_out_or_named_with_what_they_have(url):
    assert PrometheusApi(url + "/odd-targets").down_targets() == [("? ", "down"), ("api h:1", "refused")]

"""A real browser for tests: headless Chromium (Debian's `chromium`, `make system-deps`) driven over the DevTools
protocol, one browser for many pages.

Single-page apps such as the MLflow UI render after the load event, from API calls of their own, so a page counts as
open when its text shows what the test expects (or the wait runs out, and the test sees what it did show). Each page
is loaded fresh from about:blank, so text left over from the previous page cannot satisfy the wait."""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
from pathlib import Path

import httpx
from websockets.sync.client import connect

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    def __init__(self, workdir: Path, size: tuple[int, int] = (1400, 1000)):
        if CHROMIUM is None:
            raise RuntimeError("no chromium on PATH: `make system-deps` installs Debian's (apt-get install chromium)")
        profile = workdir / "chromium-profile"
        (profile / "DevToolsActivePort").unlink(missing_ok=True)  # a previous browser's port
        self.process = subprocess.Popen(
            [
                CHROMIUM,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                f"--window-size={size[0]},{size[1]}",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port = _devtools_port(profile / "DevToolsActivePort", self.process)
        pages = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        target = next(p for p in pages if p["type"] == "page")
        self.socket = connect(target["webSocketDebuggerUrl"], max_size=None, open_timeout=10)
        self.ids = itertools.count(1)
        self.call("Page.enable")

    def call(self, method: str, **params) -> dict:
        """Send one DevTools command and return its result (events that arrive meanwhile are skipped)."""
        request_id = next(self.ids)
        self.socket.send(json.dumps({"id": request_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=60))
            if message.get("id") == request_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def text(self, selector: str = "body") -> str:
        """The rendered text of the first element matching `selector` ('' when there is none yet)."""
        script = f"(document.querySelector({json.dumps(selector)}) || {{innerText: ''}}).innerText"
        return self.call("Runtime.evaluate", expression=script)["result"].get("value", "")

    def open(self, url: str, expect: list[str], screenshot: Path, timeout: float = 60) -> str:
        """Load `url` fresh, then `show` what it shows."""
        self.call("Page.navigate", url="about:blank")
        self.call("Page.navigate", url=url)
        return self.show(expect, screenshot, timeout)

    def show(self, expect: list[str], screenshot: Path, timeout: float = 60) -> str:
        """Wait until the page's text contains every string of `expect`, save a screenshot (PNG) and return the
        text (which the caller checks: the wait gives up quietly)."""
        deadline = time.monotonic() + timeout
        text = self.text()
        while not all(item in text for item in expect) and time.monotonic() < deadline:
            time.sleep(0.25)
            text = self.text()
        time.sleep(0.5)  # the last requests' rows and icons, for the screenshot
        screenshot.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return self.text()

    def click(self, selector: str) -> None:
        script = f"(e => e ? (e.click(), true) : false)(document.querySelector({json.dumps(selector)}))"
        if not self.call("Runtime.evaluate", expression=script)["result"]["value"]:
            raise AssertionError(f"nothing on the page matches {selector}")

    def click_text(self, text: str) -> None:
        """Click the innermost element whose whole rendered text is `text` (a row's label that toggles it)."""
        script = f"""(() => {{
            const found = [...document.querySelectorAll('*')]
                .filter(e => (e.innerText || '').trim() === {json.dumps(text)});
            return found.length ? (found[found.length - 1].click(), true) : false;
        }})()"""
        if not self.call("Runtime.evaluate", expression=script)["result"]["value"]:
            raise AssertionError(f"no element shows '{text}' on the page")

    def close(self) -> None:
        self.socket.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _devtools_port(path: Path, process: subprocess.Popen, timeout: float = 30) -> int:
    """Chromium writes the port it picked (`--remote-debugging-port=0`) as the first line of this file."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"chromium exited with {process.returncode} before it listened")
        if path.is_file() and (lines := path.read_text().splitlines()):
            return int(lines[0])
        time.sleep(0.1)
    raise RuntimeError(f"chromium wrote no {path.name} in {timeout:.0f} s")

"""What the `serving model ...` commands share: one-sentence errors, JSON on stdout, and the gateway's admin API
called with its bearer token."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import typer

from services.common.cli import fail
from services.common.errors import ServingError
from services.common.names import check_name, check_registered_name
from services.common.settings import RunSettings
from services.launcher.records import read_stack_info

DEFAULT_URL = "http://127.0.0.1:8080"
URL = typer.Option(
    None, "--url", help=f"The gateway (default: the one `serving up` started in the run directory, else {DEFAULT_URL})."
)
TOKEN = typer.Option(None, "--token", help="Admin token (default: GATEWAY_ADMIN_TOKEN, else run/admin-token).")


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def endpoint_path(endpoint: str, *rest: str) -> str:
    """`/admin/endpoints/ENDPOINT/...` for a valid endpoint name; the command ends saying the rule otherwise (the
    gateway would refuse it too). The other parts are quoted: a version never changes which route is called."""
    try:
        check_name(endpoint)
    except ServingError as exc:
        fail(exc.message)
    return "/".join(["/admin/endpoints", endpoint, *(quote(part, safe="") for part in rest)])


def registered_name(name: str) -> str:
    """`name` if it is a valid registered model name (MLflow's rule); the command ends saying the rule otherwise (the
    gateway and the registry would refuse it too)."""
    try:
        return check_registered_name(name)
    except ServingError as exc:
        fail(exc.message)


@dataclass(frozen=True)
class AdminApi:
    """The gateway's `/admin` routes. The token is `--token`, else GATEWAY_ADMIN_TOKEN, else the one `serving up`
    wrote to the run directory; a refusal or an unreachable gateway ends the command with one sentence."""

    url: str
    token: str | None
    run_dir: Path

    @classmethod
    def for_command(cls, url: str | None, token: str | None) -> AdminApi:
        """The API as a command sees it: the run directory read from the settings now, when the command runs; the
        gateway `url`, else the one the run directory's stack serves on, else `DEFAULT_URL`."""
        run_dir = RunSettings().run_dir
        if url is None:
            info = read_stack_info(run_dir)
            url = info.get("urls", {}).get("api") if info.get("stack") == "clearml" else None
        return cls(url or DEFAULT_URL, token, run_dir)

    def bearer(self) -> str:
        token = (self.token or os.environ.get("GATEWAY_ADMIN_TOKEN") or "").strip()
        path = self.run_dir / "admin-token"
        if token:
            return token
        if path.is_file():
            if token := path.read_text().strip():
                return token
            fail(f"the admin token file {path} is empty: delete it and `serving up` writes a new one")
        fail(f"no admin token: pass --token, set GATEWAY_ADMIN_TOKEN, or start the stack (`make up`) to create {path}")

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        headers = {"Authorization": f"Bearer {self.bearer()}"}
        try:
            response = httpx.request(method, f"{self.url.rstrip('/')}{path}", json=body, headers=headers, timeout=30)
        except httpx.HTTPError as exc:
            fail(f"the gateway at {self.url} did not answer ({exc}); is the stack up (`make up DETACH=1`)?")
        if response.status_code >= 400:
            fail(refusal(self.url, response))
        return response.json()


NEXT_STEP = {
    401: "pass the gateway's admin token: --token, GATEWAY_ADMIN_TOKEN, or the run directory's admin-token file",
    404: "`serving model list` shows the deployed endpoints and their versions",
    413: "the request is larger than the gateway takes (GATEWAY_ADMIN_MAX_BODY_BYTES)",
    503: "the gateway cannot use its deployment state now: try again in a few seconds; `serving logs` says why",
}
"""What to do next after a refusal, by status, where the gateway's message may not say it (a 503 only where the
gateway says when to retry: one without Retry-After, such as a gateway whose role may only read, says what to do)."""


def refusal(url: str, response: httpx.Response) -> str:
    """The gateway's refusal as one sentence for a person: its message, and what to do next; no status code."""
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.text[:300] or response.reason_phrase
    if response.status_code == 422:
        message = f"the gateway at {url} refused the request: {message}"
    hint = NEXT_STEP.get(response.status_code)
    if response.status_code == 503 and "retry-after" not in response.headers:
        hint = None
    if hint and "`serving " not in message:
        message = f"{message}; {hint}"
    return message

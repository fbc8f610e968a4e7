"""The documentation site builds with `mkdocs build --strict` (a broken link, anchor or cross-reference fails it), and
its references really come from the code: a generator that failed quietly would leave an empty page that builds."""

import html
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer

from loadtest.cli import app as loadtest_app
from services.cli import app as serving_app
from services.common.cli_display import summary
from tests.support.docblocks import REPO

MKDOCS = Path(sys.executable).parent / "mkdocs"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    started = time.monotonic()
    built = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    print(f"mkdocs build --strict: {time.monotonic() - started:.1f} s")
    assert built.returncode == 0, built.stderr[-5000:]
    return out


def text(site: Path, page: str) -> str:
    html = (site / page / "index.html").read_text()
    article = re.search(r"(?s)<article.*?</article>", html)[0]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", article))


def squeezed(page: str) -> str:
    """A page's text without white space or code marks (what HTML rendering adds or removes there)."""
    return re.sub(r"[\s`]", "", html.unescape(page))


def test_the_cli_reference_lists_every_command_with_its_options(site):
    serving, loadtest = text(site, "reference/cli/serving"), text(site, "reference/cli/loadtest")
    for command in ("serving up", "serving model auto-update", "serving endpoints add", "serving analyze"):
        assert command in serving
    assert "--triton-max-queue" in serving and "--trace-ratio" in serving
    for command in ("loadtest attack", "loadtest report", "loadtest matrix", "loadtest tune"):
        assert command in loadtest
    for app, page in ((serving_app, serving), (loadtest_app, loadtest)):
        for name, command in typer.main.get_command(app).commands.items():
            first = summary(command.help)
            assert f"{name}:{squeezed(first)}" in squeezed(page), f"{name}'s summary is not whole: {first}"


def test_the_http_reference_is_each_apps_openapi_document(site):
    gateway, fastapi = text(site, "reference/http-api/gateway"), text(site, "reference/http-api/fastapi")
    for path in ("/serve/ {endpoint}", "/v1/embeddings", "/health/ready"):
        assert path.replace(" ", "") in gateway.replace(" ", "") and path.replace(" ", "") in fastapi.replace(" ", "")
    assert "/admin/" in gateway and "/admin/" not in fastapi
    assert (site / "reference/http-api/gateway.json").is_file()


def test_the_http_reference_shows_the_request_examples_the_apps_document(site):
    """Each route's documented examples (sent to real servers by tests/integration/*/test_documented_examples.py),
    never one generated from the schema, whose nulls and placeholders a server refuses."""
    for page in ("gateway", "fastapi"):
        shown = squeezed(text(site, f"reference/http-api/{page}"))
        assert '{"text":"helloworld"}' in shown and '{"texts":["helloworld","goodmorning"]}' in shown
        assert '"text":null' not in shown and '"texts":null' not in shown
    assert '{"versions":["2","1"],"weights":[0.1,0.9]}' in squeezed(text(site, "reference/http-api/gateway"))


def test_the_settings_reference_documents_every_settings_class(site):
    settings = text(site, "reference/settings")
    for name in (
        "ApiSettings",
        "GatewaySettings",
        "ControllerSettings",
        "RegistrySettings",
        "RunSettings",
        "LogFileSettings",
    ):
        assert name in settings
    for field in ("max_inflight", "triton_grpc_url", "drain_seconds", "tracking_uri"):
        assert field in settings
    assert "model_config" not in settings, "pydantic's class configuration is no setting"
    for variable in (
        "SERVING_MAX_TEXTS",
        "SERVING_OBSERVABILITY__LOG_JSON",
        "GATEWAY_TRITON_GRPC_URL",
        "AGENT_HTTP_PORT",
        "SERVING_LOG_MAX_BYTES",
        "SERVING_ERROR_LOG_BURST",
    ):
        assert variable in settings, variable
    assert "GATEWAY_MAX_TEXTS is not a gateway setting" in settings and "GATEWAY_WORKERS" not in settings


def test_the_site_reads_offline(site):
    """No page loads a font, script or stylesheet from elsewhere (Material's Google Fonts are off)."""
    remote = re.compile(r"""<(?:script|link)[^>]+(?:src|href)="(https?:)?//""")
    offenders = [str(p.relative_to(site)) for p in site.rglob("*.html") if remote.search(p.read_text())]
    assert offenders == []

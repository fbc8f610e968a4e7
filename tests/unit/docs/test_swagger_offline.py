"""`/docs` and `/redoc` work offline: every script, stylesheet and icon they load is served by the app itself (FastAPI's
defaults load them from CDNs, and the page is blank without internet)."""

import re

import pytest
from fastapi.testclient import TestClient

from services.common.settings import ApiSettings
from services.fastapi_stack.app import create_app as fastapi_app
from services.gateway.app import create_app as gateway_app
from services.gateway.settings import GatewaySettings

ASSET = re.compile(r"""(?:src|href|url)\s*[=:(]\s*['"]?([^'")\s>]+)""")


@pytest.fixture(params=["fastapi", "gateway"])
def client(request) -> TestClient:
    """The app as a server runs it (every middleware), without its lifespan: the pages need no model."""
    app = fastapi_app(ApiSettings()) if request.param == "fastapi" else gateway_app(GatewaySettings())
    return TestClient(app)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_api_pages_load_only_assets_the_server_serves(client, page):
    html = client.get(page)
    assert html.status_code == 200 and "text/html" in html.headers["content-type"]
    urls = set(ASSET.findall(html.text))
    assert urls, html.text
    remote = sorted(url for url in urls if "//" in url)
    assert remote == [], f"{page} loads {remote} from elsewhere: blank offline"
    print(page, sorted(urls))
    for url in urls:
        answer = client.get(url)
        assert answer.status_code == 200 and answer.content, url


def test_the_assets_are_the_real_swagger_ui_and_redoc(client):
    assert b"SwaggerUIBundle" in client.get("/docs-assets/swagger-ui-bundle.js").content
    assert b"Redoc" in client.get("/docs-assets/redoc.standalone.js").content
    assert client.get("/openapi.json").json()["paths"]

"""The API documentation works on an air-gapped machine: ``/docs`` and ``/redoc`` load every
script, style and icon from the app itself (the ``fastapi-offline`` wheel's copies), none from a CDN.

Regression: FastAPI's default pages load Swagger UI and ReDoc from cdn.jsdelivr.net, so ``/docs``
was a blank page offline.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from logitjudge import Judge
from logitjudge.server.app import create_app

# Every URL a page can make the browser fetch: src/href attributes, and the spec's `url: '...'`.
_REFERENCES = re.compile(r"""(?:\b(?:src|href)\s*=\s*|\burl\s*:\s*)["']([^"']+)["']""", re.IGNORECASE)
_ANY_HOST = re.compile(r"""(?:https?:)?//[a-z0-9.-]+""", re.IGNORECASE)

_CONTENT_TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png", ".json": "application/json"}


@pytest.fixture
def docs_client(scripted_judge: Judge):
    # With API keys on: the pages and their assets must still load without one.
    with TestClient(create_app(scripted_judge, api_keys=["docs-test-key"])) as c:
        yield c


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_reference_no_external_host_and_their_assets_load_from_the_app(
    docs_client: TestClient, page: str
) -> None:
    r = docs_client.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    html = r.text
    assert not _ANY_HOST.findall(html), _ANY_HOST.findall(html)  # no http://, https:// or //host
    refs = _REFERENCES.findall(html)
    assert any(ref.endswith(".js") for ref in refs), refs  # the page does load its UI script
    for ref in refs:
        parts = urlsplit(ref)
        assert not parts.scheme and not parts.netloc and ref.startswith("/"), ref
        asset = docs_client.get(ref)
        assert asset.status_code == 200, (ref, asset.status_code)
        assert len(asset.content) > 100, ref
        suffix = ref[ref.rfind(".") :]
        assert _CONTENT_TYPES[suffix] in asset.headers["content-type"], (ref, asset.headers["content-type"])


def test_swagger_ui_does_not_call_the_online_validator(docs_client: TestClient) -> None:
    # Swagger UI's default validatorUrl sends the spec's URL to validator.swagger.io for a badge.
    assert '"validatorUrl": null' in docs_client.get("/docs").text

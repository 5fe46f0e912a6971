"""The daemon's /docs page loads Swagger UI from the package, not from a CDN (air-gapped clusters)."""

from __future__ import annotations

import pytest
from daemonproc import serve

pytest.importorskip("swagger_ui_bundle")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    yield from serve(tmp_path_factory, "docs", "--period-s", "0.5")


def test_docs_page_and_its_assets_come_from_the_daemon(daemon):
    with daemon.client() as c:
        page = c.get("/docs")
        assert page.status_code == 200 and "swagger-ui" in page.text
        assert "cdn." not in page.text and "https://" not in page.text.replace("https://fastapi.tiangolo.com", ""), page.text
        for asset in ("/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css"):
            assert asset in page.text
            r = c.get(asset)
            assert r.status_code == 200 and len(r.content) > 10_000, asset
        assert c.get("/openapi.json").json()["info"]["title"] == "rl-planner daemon"

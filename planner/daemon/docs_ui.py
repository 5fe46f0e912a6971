"""The daemon's ``/docs`` page (Swagger UI) served from the package: no CDN, so it also loads on an
air-gapped cluster. FastAPI's default page fetches Swagger UI's script and stylesheet from
jsdelivr; here they come from the ``swagger-ui-bundle`` package's copy, mounted at
``/docs/assets``. ReDoc (CDN only) is off; ``/openapi.json`` is unchanged."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, PlainTextResponse

ASSETS = "/docs/assets"


def mount_docs(app: FastAPI) -> None:
    """``/docs`` and its assets on ``app`` (created with ``docs_url=None, redoc_url=None``)."""
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:  # the page needs the package's assets; the API and /openapi.json work without
        @app.get("/docs", include_in_schema=False)
        async def no_docs() -> PlainTextResponse:
            return PlainTextResponse("Swagger UI's assets are not installed (pip install swagger-ui-bundle); "
                                     "the API description is at /openapi.json", status_code=404)
        return
    from starlette.staticfiles import StaticFiles

    app.mount(ASSETS, StaticFiles(directory=swagger_ui_path), name="swagger-ui-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} - API",
                                   swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js", swagger_css_url=f"{ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{ASSETS}/favicon-32x32.png")

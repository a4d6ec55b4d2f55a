"""What a browser gets from ``gpurag serve``: the question page at ``/`` (static files of this
package), the API docs at ``/docs`` (Swagger UI) and ``/redoc`` from the assets that the
``fastapi-offline`` package bundles (nothing is fetched from a CDN), and the access log.
"""

from __future__ import annotations

import logging
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"
ACCESS_LOG = logging.getLogger("gpurag.serve.access")


def docs_assets() -> Path | None:
    """The folder of Swagger UI and ReDoc assets bundled by ``fastapi-offline`` (or None)."""
    spec = find_spec("fastapi_offline")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "static"
    return folder if (folder / "swagger-ui-bundle.js").is_file() else None


def add_web_routes(app: FastAPI) -> None:
    """``/`` (the question page), ``/ui/*`` (its files), ``/docs``, ``/redoc`` and their
    assets under ``/docs/assets``. None needs a key: the page asks for one when the API does."""
    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")

    app.mount("/ui", StaticFiles(directory=STATIC), name="ui")
    assets = docs_assets()
    if assets is None:
        missing = {"detail": "API docs need the fastapi-offline package: "
                             "pip install 'gpurag[serve]' (the schema is at /openapi.json)"}

        @app.get("/docs", include_in_schema=False)
        async def no_docs() -> JSONResponse:
            return JSONResponse(missing, status_code=404)
        return
    app.mount("/docs/assets", StaticFiles(directory=assets), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} API",
            swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css",
            swagger_favicon_url="/docs/assets/favicon.png")

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=app.openapi_url or "/openapi.json",
                              title=f"{app.title} API",
                              redoc_js_url="/docs/assets/redoc.standalone.js",
                              redoc_favicon_url="/docs/assets/favicon.png",
                              with_google_fonts=False)


class AccessLog:
    """ASGI middleware: one line per request in the Common Log Format, followed by the
    seconds taken: ``127.0.0.1 - - [01/Dec/2026:11:40:00 +0000] "POST /v1/query HTTP/1.1"
    200 1234 0.012``, on the ``gpurag.serve.access`` logger at INFO. The query string and
    the Authorization header are never logged."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not ACCESS_LOG.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status, size = 500, 0

        async def counted(message: dict) -> None:
            nonlocal status, size
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                size += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            client = scope.get("client") or ("-", 0)
            when = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime())
            line = (f'{scope.get("method", "-")} {scope.get("path", "-")} '
                    f'HTTP/{scope.get("http_version", "1.1")}')
            ACCESS_LOG.info('%s - - [%s] "%s" %d %d %.3f', client[0], when,
                            line.encode("unicode_escape").decode("ascii").replace('"', '\\"'),
                            status, size, time.perf_counter() - t0)

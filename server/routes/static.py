"""The chat page: ``server/static`` (built from ``frontend/``) at ``/`` and its assets at ``/assets``.

Only ``/``, ``/index.html`` and ``/assets/...`` are claimed, so every other path keeps the API's own
404 and 405 answers. When the page has not been built (a source checkout: the wheel and the sdist
always carry it), ``/`` answers with a short page that says how to build it, naming no server path:
the server runs without Node, only the page needs it.
"""

from __future__ import annotations

import html
import os
from os import PathLike
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

__all__ = ["STATIC_DIR", "static_routes"]

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
BUILD_COMMAND = "cd frontend && npm ci && npm run build"

# The built page loads only its own files and talks only to this server (``blob:`` images: a cited
# page's picture fetched with the reader's token, which an ``<img src>`` cannot send).
PAGE_HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

NOT_BUILT = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>ragstream: page not built</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body style="font-family: system-ui, sans-serif; max-width: 40rem; margin: 3rem auto; padding: 0 1rem">
<h1>The chat page is not built</h1>
<p>The ragstream server is running and its API works (<code>POST /agui</code>, <code>GET /threads</code>,
<code>GET /documents</code>), but this copy of ragstream has no web page: it runs from a source
checkout where the page has not been built. (An installed ragstream carries the page: its wheel
and its source archive are built with it.)</p>
<p>Build it (needs Node.js 20.19 or newer) from the checkout's root, then reload this page:</p>
<pre><code>{command}</code></pre>
<p>or run <code>bash scripts/build-frontend.sh</code>.</p>
</body>
</html>
"""


class _HashedAssets(StaticFiles):
    """Vite names assets after their content hash, so a browser may keep them for good.

    Until the page is built there is no assets folder: an asset is then a 404 (Starlette's check of
    the folder would answer 500), and the page may be built while the server runs.
    """

    async def check_config(self) -> None:
        if self.directory is not None and os.path.isdir(self.directory):
            await super().check_config()

    def file_response(
        self,
        full_path: PathLike[str] | str,
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers["Cache-Control"] = "public, max-age=31536000, immutable"
        return response


def static_routes(directory: Path = STATIC_DIR) -> list[BaseRoute]:
    """Routes for the page in ``directory``; append them after the API routes."""
    index = directory / "index.html"

    async def page(request: Request) -> Response:
        # Checked per request: building the page does not need a server restart.
        if not index.is_file():
            body = NOT_BUILT.format(command=html.escape(BUILD_COMMAND))  # no server path for anyone
            return HTMLResponse(body, headers={"Cache-Control": "no-store"})
        return FileResponse(index, media_type="text/html", headers=PAGE_HEADERS)

    return [
        Route("/", page, methods=["GET", "HEAD"]),
        Route("/index.html", page, methods=["GET", "HEAD"]),
        Mount("/assets", app=_HashedAssets(directory=directory / "assets", check_dir=False), name="assets"),
    ]

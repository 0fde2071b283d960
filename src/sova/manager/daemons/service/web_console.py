"""The operator's web console: three static files under ``/console/`` that drive the
manager's own ``/v1`` API from the browser (docs/operations.md, "The web console").

Nothing here decides or authorizes: the page sends the operator's bearer token on every
API call and the guard in front of ``/v1`` (:mod:`sova.manager.daemons.service.guard`) applies the
credential's role as it does for the CLI, so a viewer's approve is refused with the API's
own 403. The files are served from the package (no CDN, no build step) with a policy that
lets the page load nothing from elsewhere. There is no cookie, so a page on another site
cannot make the browser act for the operator (nothing to forge across sites: the token
sits in the tab's sessionStorage and travels only in the Authorization header).
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

PREFIX = "/console"
# name -> media type: the whole console, read from the package once.
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
# The page's own origin only: no inline script, no remote asset, no framing, no form
# posted anywhere (a script injected through a host's or a reason's text could not run).
HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def console_router() -> APIRouter:
    """``GET /console/`` and its assets; not part of the API's OpenAPI document."""
    root = files("sova.manager.daemons.service") / "console"
    body = {name: (root / name).read_bytes() for name in ASSETS}
    router = APIRouter(include_in_schema=False)

    @router.get(PREFIX)
    async def console_redirect() -> RedirectResponse:
        return RedirectResponse(PREFIX + "/", status_code=308)

    @router.get(PREFIX + "/")
    async def console_page() -> Response:
        return Response(body["index.html"], media_type=ASSETS["index.html"], headers=HEADERS)

    @router.get(PREFIX + "/{name}")
    async def console_asset(name: str) -> Response:
        if name not in ASSETS:
            return Response(status_code=404)
        return Response(body[name], media_type=ASSETS[name], headers=HEADERS)

    return router

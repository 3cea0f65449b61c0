"""The plugin's FastAPI app: pages, JSON API and static files, all behind Airflow's auth.

Airflow mounts plugin apps without any protection of their own, so this app declares
:func:`security.require_viewer` as an app-level dependency: every route, the static files
and the OpenAPI document included, runs only for an authenticated user (401/403 otherwise;
a page asked for by a browser redirects to Airflow's login instead). The built-in
``/docs`` pages are off (their assets come from a CDN); ``/api/openapi.json`` is served
behind the same dependency.

Every answer carries a strict Content-Security-Policy (scripts and styles only from this
app, no inline script, framing only by the same origin, i.e. the Airflow UI): a second
wall behind the escaping of everything rendered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import RedirectResponse, Response

from . import api, pages
from .broker_source import SOURCE, BrokerSource
from .security import require_viewer

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'self'")


def _wants_page(request: Request) -> bool:
    path = request.url.path[len(pages.base_path(request)):]
    return (request.method == "GET" and not path.startswith(("/api/", "/static/"))
            and "text/html" in request.headers.get("accept", ""))


def _login_url(request: Request) -> str:
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager().get_url_login(next_url=str(request.url))


def create_app(source: BrokerSource | None = None) -> FastAPI:
    """The app Airflow mounts at ``/txn-broker``. ``source``: the broker to read (default:
    the process-wide one of ``[txn_broker] ui_conn_id``)."""
    app = FastAPI(
        title="txn_broker: transactions in the Airflow UI",
        description="The JSON API of the Transactions page (see docs/ui.md). Every endpoint needs an "
                    "authenticated Airflow user: a JWT as `Authorization: Bearer` or the UI's `_token` cookie.",
        version="1",
        dependencies=[Depends(require_viewer)],
        docs_url=None, redoc_url=None, openapi_url=None,
    )
    app.state.broker_source = source or SOURCE
    app.include_router(api.router)
    app.include_router(pages.router)

    @app.get("/api/openapi.json", include_in_schema=False)
    def openapi() -> dict[str, Any]:
        return app.openapi()

    @app.exception_handler(HTTPException)
    async def unauthenticated_page(request: Request, error: HTTPException) -> Response:
        if error.status_code == status.HTTP_401_UNAUTHORIZED and _wants_page(request):
            return RedirectResponse(_login_url(request), status_code=status.HTTP_303_SEE_OTHER)
        return await http_exception_handler(request, error)

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        if "/api/" in request.url.path:
            response.headers.setdefault("Cache-Control", "no-store")
        return response

    return app

"""The application: routes by area, one access guard, one error shape, and the web
view's pages (turnkeeper/web/) next to the JSON routes.

``create_app(store, root)`` is the server ``turnkeeper serve`` runs. Every route is
guarded by the access mode it declares (turnkeeper/api/access.py); :func:`build_app`
refuses to build an app with a route that declares none.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.routing import APIRoute

from turnkeeper import __version__
from turnkeeper.api import events, routes_goals, routes_sessions, routes_status
from turnkeeper.api.access import authorize, check_routes, declared
from turnkeeper.api.errors import ERROR_RESPONSES, install_error_handlers
from turnkeeper.api.logs import log_requests
from turnkeeper.api.metrics import metrics_registry
from turnkeeper.api.observer import TurnObserver
from turnkeeper.errors import PermissionDenied
from turnkeeper.json_types import JsonDict
from turnkeeper.notify.deliverer import delivering
from turnkeeper.store.base import EventStore
from turnkeeper.web import ROUTERS as PAGE_ROUTERS
from turnkeeper.web import authorize_page, install_page_support, page_kind

ROUTERS: tuple[APIRouter, ...] = (
    routes_status.router,
    routes_goals.router,
    routes_sessions.router,
    events.router,
    routes_status.plain,
)

DESCRIPTION = """\
turnkeeper's operations over HTTP. Every call needs `Authorization: Bearer TOKEN`:
the project's admin token, or a share of one session (read-only or update).
Every error is `{"error": {"code", "reason", "message", "details"}}`.
"""


def guard(request: Request) -> None:
    """The access check of the route being called (fails closed for a route without a
    declaration, which :func:`check_routes` already refuses at build time)."""
    route = request.scope.get("route")
    needed = declared(route) if isinstance(route, APIRoute) else None
    if needed is None:
        raise PermissionDenied("this route declares no access mode", reason="undeclared_route")
    # A page of the web view authenticates by its session cookie, an API route by its
    # bearer token; both are then checked against the same declaration.
    check = authorize_page if page_kind(route) is not None else authorize
    request.state.principal = check(request.app.state.store, request, needed)


def build_app(store: EventStore, root: Path, routers: Sequence[APIRouter]) -> FastAPI:
    observer = TurnObserver(store)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Webhooks for what needs a person (docs/notifications.md).
        with delivering(store):
            yield

    app = FastAPI(
        title="turnkeeper",
        version=__version__,
        description=DESCRIPTION,
        dependencies=[Depends(guard)],
        responses=ERROR_RESPONSES,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.store = store
    app.state.root = root.resolve()
    app.state.observer = observer
    app.state.metrics = metrics_registry(observer)
    for router in routers:
        app.include_router(router)
    install_error_handlers(app)
    app.middleware("http")(log_requests)
    check_routes(app)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> JsonDict:
    """FastAPI's description, with the bearer token every route needs."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi

        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
        schemes["bearer"] = {"type": "http", "scheme": "bearer"}
        schema["security"] = [{"bearer": []}]
        app.openapi_schema = schema
    return app.openapi_schema


def create_app(store: EventStore, root: Path) -> FastAPI:
    """The API on ``store`` for the project at ``root``. The server runs no turns, so it
    makes no spans: whoever runs a turn does (runtime/turn/spans.py)."""
    app = build_app(store, root, (*ROUTERS, *PAGE_ROUTERS))
    install_page_support(app)
    return app

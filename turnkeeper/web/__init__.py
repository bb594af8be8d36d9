"""The web view of ``turnkeeper serve``: pages for people, on the API's services.

:data:`ROUTERS` are served next to the JSON API by the same app; :func:`install_page_support`
adds what pages need around them (the login link, pages for errors).
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI

from turnkeeper.web.auth import WebSessions, authorize_page, login_middleware, page_kind
from turnkeeper.web.gates import GateOrigins
from turnkeeper.web.render import install_page_errors, login_refused
from turnkeeper.web.routes import router

ROUTERS: tuple[APIRouter, ...] = (router,)

__all__ = ["ROUTERS", "authorize_page", "install_page_support", "page_kind"]


def install_page_support(app: FastAPI) -> None:
    """Web sessions, the login link and error pages for an app serving :data:`ROUTERS`
    (and the origins of its gates, found once each)."""
    app.state.web_sessions = WebSessions()
    app.state.gate_origins = GateOrigins()
    install_page_errors(app)
    app.middleware("http")(login_middleware(login_refused))

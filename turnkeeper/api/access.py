"""Access control by construction: every route declares what it needs.

A route's endpoint is decorated with :func:`access`, naming its **mode** and its
**scope**:

* mode ``read`` (reads only), ``update`` (changes a session or the work), ``delete``
  (deletes a session) or ``admin`` (the project as a whole: tokens, shares, metrics);
* scope ``session`` (the route's ``session_id`` path parameter names the one session
  it touches), ``project`` (anything else) or ``any`` (no project data at all, such
  as the API's own description).

Who passes:

=========================  ===========================================================
caller                     may call
=========================  ===========================================================
the admin token            every route
an ``update`` share        ``read`` and ``update`` routes of scope ``session`` for its
                           own session, and scope ``any``
a read-only share          ``read`` routes of scope ``session`` for its own session,
                           and scope ``any``
=========================  ===========================================================

A share names its session by its full id: a prefix is refused rather than resolved,
so that a share holder cannot probe which other sessions exist. :func:`check_routes`
runs when the app is built and refuses an app with a route that declared nothing,
so a new route cannot be reachable by accident.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

import fastapi.routing
from fastapi import FastAPI, Request
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from turnkeeper.errors import PermissionDenied
from turnkeeper.runtime.services.access import AccessService, Principal, Share
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.store.base import EventStore

Mode = Literal["read", "update", "delete", "admin"]
Scope = Literal["session", "project", "any"]
MODES: tuple[Mode, ...] = ("read", "update", "delete", "admin")
_ATTRIBUTE = "__turnkeeper_access__"
SESSION_PARAM = "session_id"

F = TypeVar("F", bound=Callable[..., object])


@dataclass(frozen=True)
class Access:
    mode: Mode
    scope: Scope


class Unauthenticated(PermissionDenied):
    """No token, or one this project does not know: HTTP 401 (the taxonomy has no code
    of its own for it; the body says PERMISSION_DENIED with reason ``no_token`` or
    ``invalid_token``)."""


def access(mode: Mode, scope: Scope = "project") -> Callable[[F], F]:
    """Declare the access an endpoint needs (see the module docstring)."""
    if mode not in MODES:
        raise ValueError(f"unknown access mode {mode!r}")

    def mark(func: F) -> F:
        setattr(func, _ATTRIBUTE, Access(mode, scope))
        return func

    return mark


def declared(route: APIRoute) -> Access | None:
    found = getattr(route.endpoint, _ATTRIBUTE, None)
    return found if isinstance(found, Access) else None


class UndeclaredRouteError(RuntimeError):
    """An app was built with a route that declares no access mode."""


def app_routes(app: FastAPI) -> list[BaseRoute]:
    """Every route ``app`` serves, those of included routers too."""
    iterate = getattr(fastapi.routing, "iter_route_contexts", None)
    if iterate is None:  # FastAPI before lazily included routers: the list is flat
        return list(app.routes)
    return [context.original_route for context in iterate(app.routes)]


def check_routes(app: FastAPI) -> None:
    """Every route of ``app`` is an API route with a declared access mode; a session
    scoped one has the ``session_id`` path parameter it is scoped by."""
    for route in app_routes(app):
        if not isinstance(route, APIRoute):
            raise UndeclaredRouteError(f"route {getattr(route, 'path', route)!r} is no API route")
        found = declared(route)
        if found is None:
            raise UndeclaredRouteError(f"route {route.path} declares no access mode")
        if found.scope == "session" and "{" + SESSION_PARAM + "}" not in route.path:
            raise UndeclaredRouteError(
                f"route {route.path} is session scoped without {{session_id}}"
            )


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else ""


def authorize(store: EventStore, request: Request, needed: Access) -> Principal:
    """The caller, if it may call this route; else the typed refusal. Reads only."""
    return authorize_token(store, request, needed, bearer_token(request))


def authorize_token(
    store: EventStore, request: Request, needed: Access, token: str | None
) -> Principal:
    """:func:`authorize` for a token found elsewhere than the ``Authorization`` header
    (the web view's pages find it through their session cookie)."""
    if token is None:
        raise Unauthenticated("this API needs a bearer token", reason="no_token")
    principal = AccessService(store).authenticate(token) if token else None
    if principal is None:
        raise Unauthenticated("the bearer token is not valid here", reason="invalid_token")
    if principal.share is None:
        return principal
    share = principal.share
    # A deleted session's shares stop working for every route, the harmless ones too.
    if SessionService(store).load(share.session_id).status == "deleted":
        raise PermissionDenied(
            "the shared session was deleted",
            reason="session_deleted",
            details={"share_id": share.share_id},
        )
    refusal = share_refusal(share, needed, request.path_params.get(SESSION_PARAM))
    if refusal is not None:
        raise refusal
    return principal


def share_refusal(share: Share, needed: Access, session_id: object) -> PermissionDenied | None:
    """Why ``share`` may not call a route needing ``needed`` for the session
    ``session_id`` (the route's path parameter), or None when it may."""
    if needed.scope == "any":
        return None
    if needed.scope != "session" or session_id != share.session_id:
        return PermissionDenied(
            "a share reaches its own session only (named by its full id)",
            reason="share_scope",
            details={"share_id": share.share_id},
        )
    if needed.mode in ("delete", "admin") or (needed.mode == "update" and share.mode != "update"):
        return PermissionDenied(
            f"a {share.mode} share may not do this ({needed.mode})",
            reason="share_mode",
            details={"share_id": share.share_id, "mode": share.mode, "needed": needed.mode},
        )
    return None

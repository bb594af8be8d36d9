"""Signing in to the web view, and the check every page request passes.

``turnkeeper serve`` prints a login link, ``/?token=TOKEN``. Following it (or a
share's link) opens a **web session**: a random id in an HttpOnly, SameSite=Strict
cookie, mapped in this process's memory to the token. The token never goes into the
cookie, and the link's URL is replaced by a redirect so it does not stay in the
address bar or the history. A restart of the server forgets its web sessions (the
links still work).

Each page request looks its web session up and is then checked exactly as an API
call is (``authorize_token``: the route's declared mode and scope, the share's own
session, a revoked share or a retired admin token refused at once). A request that
changes something (any method but GET) must also be same-origin (``Origin`` and
``Sec-Fetch-Site``, when the browser sends them) and carry the web session's CSRF
token in the ``X-CSRF-Token`` header, which the pages' htmx sends and no other site
can read. Those checks run before the route, so a refused request writes nothing.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TypeVar

import anyio.to_thread
from fastapi import Request, Response
from fastapi.responses import RedirectResponse
from fastapi.routing import APIRoute

from turnkeeper.api.access import Access, authorize_token
from turnkeeper.errors import PermissionDenied
from turnkeeper.runtime.services.access import AccessService, Principal
from turnkeeper.store.base import EventStore

COOKIE: Final = "tk_session"
CSRF_HEADER: Final = "X-CSRF-Token"
# An idle web session ends; a busy server keeps at most this many (oldest dropped).
IDLE_SECONDS: Final = 12 * 3600.0
MAX_SESSIONS: Final = 10_000
_PAGE: Final = "__turnkeeper_page__"
_SAFE_METHODS: Final = frozenset({"GET", "HEAD"})

F = TypeVar("F", bound=Callable[..., object])


@dataclass
class WebSession:
    session_id: str  # the cookie's value
    token: str
    csrf: str
    last_used: float


class WebSessions:
    """The open web sessions of this process (thread safe: routes run in threads)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._open: OrderedDict[str, WebSession] = OrderedDict()
        self._clock = clock

    def open(self, token: str) -> WebSession:
        made = WebSession(
            secrets.token_urlsafe(32), token, secrets.token_urlsafe(32), self._clock()
        )
        with self._lock:
            self._open[made.session_id] = made
            while len(self._open) > MAX_SESSIONS:
                self._open.popitem(last=False)
        return made

    def get(self, session_id: str | None) -> WebSession | None:
        if not session_id:
            return None
        now = self._clock()
        with self._lock:
            found = self._open.get(session_id)
            if found is None:
                return None
            if now - found.last_used > IDLE_SECONDS:
                del self._open[session_id]
                return None
            found.last_used = now
            self._open.move_to_end(session_id)
            return found

    def close(self, session_id: str) -> None:
        with self._lock:
            self._open.pop(session_id, None)


def page(*, public: bool = False) -> Callable[[F], F]:
    """Mark an endpoint as a page of the web view (cookie, not bearer token); a
    ``public`` one (the package's own static files) is served without a session."""

    def mark(func: F) -> F:
        setattr(func, _PAGE, "public" if public else "page")
        return func

    return mark


def page_kind(route: object) -> str | None:
    """``page``, ``public`` or None (an API route)."""
    if not isinstance(route, APIRoute):
        return None
    found = getattr(route.endpoint, _PAGE, None)
    return found if isinstance(found, str) else None


def is_page_path(path: str) -> bool:
    """Whether an answer for ``path`` is for a person (HTML) rather than a program."""
    return not (path.startswith("/v1/") or path == "/v1" or path.startswith("/metrics"))


def web_sessions(request: Request) -> WebSessions:
    found: WebSessions = request.app.state.web_sessions
    return found


def _same_origin(request: Request) -> bool:
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True  # not a browser's cross-site request: the CSRF token decides
    host = request.headers.get("host", "")
    return origin == f"{request.url.scheme}://{host}"


def authorize_page(store: EventStore, request: Request, needed: Access) -> Principal | None:
    """The caller of a page route, or the typed refusal (None for a public file)."""
    if page_kind(request.scope.get("route")) == "public":
        return None
    mutating = request.method not in _SAFE_METHODS
    if mutating and not _same_origin(request):
        raise PermissionDenied("a request from another site is refused", reason="cross_site")
    entry = web_sessions(request).get(request.cookies.get(COOKIE))
    try:
        principal = authorize_token(store, request, needed, entry.token if entry else None)
    except PermissionDenied:
        # Who was refused, for the error page alone: it links a share back to its own
        # session (authenticated, never authorized: nothing else reads it).
        if entry is not None:
            request.state.refused_caller = AccessService(store).authenticate(entry.token)
        raise
    if mutating:
        sent = request.headers.get(CSRF_HEADER, "")
        if entry is None or not secrets.compare_digest(sent.encode(), entry.csrf.encode()):
            raise PermissionDenied(
                "this request does not come from one of this server's pages (CSRF token)",
                reason="csrf",
            )
    request.state.web_session = entry
    return principal


def landing(principal: Principal) -> str:
    """Where a login goes: the sessions page, or a share's one session."""
    return "/" if principal.share is None else f"/sessions/{principal.share.session_id}"


LoginRefused = Callable[[Request], Awaitable[Response]]


def login_middleware(
    refused: LoginRefused,
) -> Callable[[Request, Callable[[Request], Awaitable[Response]]], Awaitable[Response]]:
    """``GET <page>?token=TOKEN``: open a web session for a known token and redirect
    to the page without the token in its URL; an unknown token gets ``refused``."""

    async def login(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        token = request.query_params.get("token")
        if token is None or request.method != "GET" or not is_page_path(request.url.path):
            return await call_next(request)
        store: EventStore = request.app.state.store
        principal = await anyio.to_thread.run_sync(AccessService(store).authenticate, token)
        if principal is None:
            return await refused(request)
        entry = web_sessions(request).open(token)
        response = RedirectResponse(landing(principal), status_code=303)
        response.set_cookie(
            COOKIE,
            entry.session_id,
            httponly=True,
            samesite="strict",
            path="/",
            secure=request.url.scheme == "https",
        )
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        return response

    return login

"""Rendering pages: the Jinja2 environment, its filters, the headers every page gets,
and refusals and failures as pages.

Templates autoescape everything: ids, reasons and host output come from agents,
users and the database. The API's error handlers decide the status and the error
body of every failure; for a page path the body becomes a page (or, for an htmx
request, a notice the page shows), so the two never disagree.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.exceptions import HTTPException as StarletteHTTPException

from turnkeeper.errors import TurnkeeperError
from turnkeeper.json_types import JsonMapping
from turnkeeper.web.auth import is_page_path

HERE: Final = Path(__file__).parent
SHORT_ID: Final = 8
# The pages load scripts and styles from this server only; htmx is told not to add
# inline styles or evaluate code (see the htmx-config meta tag in base.html).
CSP: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
PAGE_HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _when(value: datetime | str | None) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def relative(value: datetime | str | None, now: datetime | None = None) -> str:
    """``3 min ago`` / ``in 2 h``: what app.js keeps up to date in the browser."""
    when = _when(value)
    if when is None:
        return "-"
    seconds = ((now or datetime.now(UTC)) - when).total_seconds()
    ahead, seconds = seconds < 0, abs(seconds)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min"), (1, "s")):
        if seconds >= size or unit == "s":
            text = f"{int(seconds // size)} {unit}"
            break
    return f"in {text}" if ahead else f"{text} ago"


def exact(value: datetime | str | None) -> str:
    when = _when(value)
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if when else ""


def iso(value: datetime | str | None) -> str:
    when = _when(value)
    return when.isoformat() if when else ""


def short(value: str | None) -> str:
    """A long id cut for reading (``turn-`` and ``session-`` style prefixes kept)."""
    if not value:
        return "-"
    head, sep, rest = value.partition("-")
    if sep and head in ("turn", "share", "mon", "ev", "gate") and len(rest) > SHORT_ID:
        return f"{head}-{rest[:SHORT_ID]}…"
    return value if len(value) <= SHORT_ID + 4 else value[:SHORT_ID] + "…"


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 60:
        return f"{value:.1f} s"
    return f"{int(value // 60)} min {int(value % 60)} s"


def path_part(value: str) -> str:
    """An id as one part of a URL's path: an agent may name a gate ``ship?#1``."""
    return urllib.parse.quote(value, safe="")


ENV: Final = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.filters.update(
    relative=relative, exact=exact, iso=iso, short=short, seconds=seconds, path_part=path_part
)
ENV.filters["tojson_attr"] = lambda value: json.dumps(value, sort_keys=True)


def render(
    request: Request, template: str, status_code: int = 200, **context: object
) -> HTMLResponse:
    web_session = getattr(request.state, "web_session", None)
    context.setdefault("principal", getattr(request.state, "principal", None))
    context["csrf"] = web_session.csrf if web_session is not None else ""
    context["now"] = datetime.now(UTC)
    body = ENV.get_template(template).render(request=request, **context)
    return HTMLResponse(body, status_code=status_code, headers=PAGE_HEADERS)


_TITLES: Final = {
    401: "Not signed in",
    403: "Not allowed",
    404: "Not found",
    409: "Conflict",
    412: "Not possible now",
    422: "Already used",
}
_HINTS: Final = {
    "no_token": "Open the login link `turnkeeper serve` printed, or a share's link.",
    "invalid_token": "This link or token is not valid here (revoked, or the server was "
    "started with another admin token). Ask for a new link.",
    "share_scope": "This link shows one session and its goal only; the project's other "
    "pages, and deciding a gate, need the admin's login link.",
    "csrf": "Reload the page and try again.",
    "cross_site": "Use the controls on this server's own pages.",
}

_INTERNAL: Final = {"code": "INTERNAL", "reason": "internal", "message": "internal error"}

Handler = Callable[[Request, Exception], Response | Awaitable[Response]]


def _page_or(original: Handler) -> Handler:
    async def handle(request: Request, exc: Exception) -> Response:
        answer = original(request, exc)
        if not isinstance(answer, Response):
            answer = await answer
        if not is_page_path(request.url.path):
            return answer
        try:
            found = json.loads(bytes(answer.body))["error"]
        except (KeyError, ValueError, TypeError):
            found = None
        # The API's error handlers wrote this body: its "error" is an object.
        error: JsonMapping = found if isinstance(found, dict) else _INTERNAL
        return error_page(request, answer.status_code, error)

    return handle


# Refusals after which a share's own session is still open to it: the page links back.
_STILL_SHARED: Final = frozenset({"share_scope", "share_mode", "csrf", "cross_site"})


def error_page(request: Request, status: int, error: JsonMapping) -> HTMLResponse:
    principal = getattr(request.state, "principal", None)
    caller = principal or getattr(request.state, "refused_caller", None)
    share = getattr(caller, "share", None)
    still_shared = principal is not None or str(error.get("reason")) in _STILL_SHARED
    context = {
        "status": status,
        "title": _TITLES.get(status, "Error" if status < 500 else "Server error"),
        "error": error,
        "hint": _HINTS.get(str(error.get("reason")), ""),
        "own_session": share.session_id if share is not None and still_shared else None,
        "principal": caller,
    }
    template = "_notice.html" if request.headers.get("hx-request") else "error.html"
    response = render(request, template, status_code=status, **context)
    if status == 401:
        response.headers["WWW-Authenticate"] = "Bearer"
    return response


async def login_refused(request: Request) -> Response:
    error = {
        "code": "PERMISSION_DENIED",
        "reason": "invalid_token",
        "message": "the login link's token is not valid here",
    }
    return error_page(request, 401, error)


def install_page_errors(app: FastAPI) -> None:
    """Wrap the API's error handlers: the same status, as a page on page paths."""
    for kind in (TurnkeeperError, RequestValidationError, StarletteHTTPException, Exception):
        original = app.exception_handlers[kind]
        app.add_exception_handler(kind, _page_or(original))

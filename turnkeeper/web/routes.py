"""The web view's routes: pages, the parts of them htmx refreshes, the live host log,
the session controls and the package's static files.

Every route declares its access mode and scope like an API route (the app is not
built otherwise) and is marked as a page: it authenticates by the web session
cookie (turnkeeper/web/auth.py). A control calls the very function of the JSON
route it mirrors (``session_stop``, ``session_revert``, ...), so a refusal or a
retried revert behaves the same on both.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Final, Literal

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import FileResponse, HTMLResponse, StreamingResponse

from turnkeeper.api import events, routes_sessions
from turnkeeper.api.access import access
from turnkeeper.api.deps import IdempotencyKey, IdPath, SessionPath, store_of
from turnkeeper.store.base import EventStore
from turnkeeper.web import views
from turnkeeper.web.auth import page, web_sessions
from turnkeeper.web.render import HERE, render

router = APIRouter(include_in_schema=False)
Store = Annotated[EventStore, Depends(store_of)]
Part = Annotated[Literal["live"] | None, Query(description="Only the part htmx refreshes.")]
StatusFilter = Annotated[
    Literal["ready", "running", "suspended", "crashed", "closed", "deleted"] | None, Query()
]
STATIC: Final = {
    "htmx.min.js": "text/javascript",
    "app.js": "text/javascript",
    "app.css": "text/css",
}
StaticName = Literal["htmx.min.js", "app.js", "app.css"]
# What a control did, shown once on the page it returns to (words from fixed lists).
Done = Annotated[Literal["stop", "resume", "crash", "revert"] | None, Query()]
Result = Annotated[
    Literal[
        "ready", "running", "suspended", "crashed", "closed",
        "reverted", "unchanged", "superseded", "pending",
    ]
    | None,
    Query(),
]  # fmt: skip


@router.get("/", response_class=HTMLResponse)
@access("read")
@page()
def sessions_page(
    request: Request, store: Store, status: StatusFilter = None, part: Part = None
) -> Response:
    """Every session (filtered by status) and every goal with its audit."""
    data = views.sessions_view(store, status)
    template = "_sessions_live.html" if part == "live" else "sessions.html"
    return render(request, template, **data)


@router.get("/sessions/{session_id}", response_class=HTMLResponse)
@access("read", "session")
@page()
def session_page(
    request: Request,
    session_id: SessionPath,
    store: Store,
    part: Part = None,
    done: Done = None,
    result: Result = None,
) -> Response:
    """A session: its state, timeline, recovery report, snapshots, log and controls."""
    view = views.session_view(store, session_id, request.state.principal)
    template = "_session_live.html" if part == "live" else "session.html"
    notice = f"{done}: {result}" if done and result else None
    return render(
        request,
        template,
        view=view,
        session_ref=session_id,
        phases=views.phase_rows,
        notice=notice,
        revert_key=f"web-revert-{uuid.uuid4()}",
        delete_key=f"web-delete-{uuid.uuid4()}",
    )


@router.get("/sessions/{session_id}/events", response_class=StreamingResponse)
@access("read", "session")
@page()
def session_log(
    request: Request,
    session_id: SessionPath,
    store: Store,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=40)] = None,
    follow: Annotated[bool, Query()] = True,
) -> StreamingResponse:
    """The live host log: the API's event stream, for the page's EventSource."""
    return events.session_events(request, session_id, store, None, last_event_id, follow)


def _done(
    request: Request, session_id: str, store: EventStore, action: str, result: str
) -> Response:
    """htmx follows ``HX-Redirect``: the session page again, saying what happened."""
    sid = routes_sessions.resolve_session(store, session_id)
    target = "/" if action == "delete" else f"/sessions/{sid}?done={action}&result={result}"
    return Response(status_code=200, headers={"HX-Redirect": target, "Cache-Control": "no-store"})


@router.post("/sessions/{session_id}/stop")
@access("update", "session")
@page()
def stop(request: Request, session_id: SessionPath, store: Store) -> Response:
    answer = routes_sessions.session_stop(session_id, store, None)
    return _done(request, session_id, store, "stop", answer.session.status)


@router.post("/sessions/{session_id}/resume")
@access("update", "session")
@page()
def resume(request: Request, session_id: SessionPath, store: Store) -> Response:
    answer = routes_sessions.session_resume(session_id, store, None)
    return _done(request, session_id, store, "resume", answer.session.status)


@router.post("/sessions/{session_id}/crash")
@access("update", "session")
@page()
def crash(request: Request, session_id: SessionPath, store: Store) -> Response:
    answer = routes_sessions.session_crash(session_id, store, None)
    return _done(request, session_id, store, "crash", answer.session.status)


@router.post("/sessions/{session_id}/revert")
@access("update", "session")
@page()
def revert(
    request: Request, session_id: SessionPath, request_id: IdempotencyKey, store: Store
) -> Response:
    """The page renders the request id into the button: a second click joins."""
    answer = routes_sessions.session_revert(session_id, request_id, store)
    return _done(request, session_id, store, "revert", answer.result)


@router.post("/sessions/{session_id}/delete")
@access("delete", "session")
@page()
def delete(
    request: Request, session_id: SessionPath, request_id: IdempotencyKey, store: Store
) -> Response:
    answer = routes_sessions.session_delete(session_id, request_id, store)
    return _done(request, session_id, store, "delete", answer.result)


@router.get("/goals/{goal_id}", response_class=HTMLResponse)
@access("read")
@page()
def goal_page(request: Request, goal_id: IdPath, store: Store, part: Part = None) -> Response:
    """A goal: todos, gates, monitors, evidence and its terminal audit."""
    data = views.goal_view(store, goal_id)
    return render(request, "_goal_live.html" if part == "live" else "goal.html", **data)


@router.get("/operations", response_class=HTMLResponse)
@access("read")
@page()
def operations_page(request: Request, store: Store) -> Response:
    """Every create, revert and delete with its state."""
    return render(request, "operations.html", operations=views.operations_view(store))


@router.post("/logout")
@access("read", "any")
@page()
def logout(request: Request) -> Response:
    """End this browser's web session (the token itself keeps working)."""
    entry = request.state.web_session
    if entry is not None:
        web_sessions(request).close(entry.session_id)
    response = Response(status_code=200, headers={"HX-Redirect": "/"})
    response.delete_cookie("tk_session", path="/")
    return response


@router.get("/static/{name}")
@access("read", "any")
@page(public=True)
def static(name: StaticName) -> Response:
    """The package's own script and style files (no project data: served to anyone)."""
    return FileResponse(
        HERE / "static" / name,
        media_type=STATIC[name],
        headers={"Cache-Control": "max-age=300", "X-Content-Type-Options": "nosniff"},
    )

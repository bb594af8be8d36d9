"""The web view's routes: pages, the parts of them htmx refreshes, the live host log,
the session controls, deciding a gate and the package's static files.

Every route declares its access mode and scope like an API route (the app is not
built otherwise) and is marked as a page: it authenticates by the web session
cookie (turnkeeper/web/auth.py). A control calls the very function of the JSON
route it mirrors (``session_stop``, ``session_revert``, ``gate_resolve``, ...), so a
refusal or a retried revert behaves the same on both, and a gate decided here is
recorded as ``gate resolve --by`` records it, the signed-in caller as its decider.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Final, Literal

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import FileResponse, HTMLResponse, StreamingResponse

from turnkeeper.api import events, routes_goals, routes_sessions
from turnkeeper.api.access import access
from turnkeeper.api.deps import IdempotencyKey, IdPath, SessionPath, store_of
from turnkeeper.errors import InvalidArgument
from turnkeeper.kernel.proposals import checked_input
from turnkeeper.runtime.services.access import Principal
from turnkeeper.store.base import EventStore
from turnkeeper.web import views
from turnkeeper.web.auth import page, web_sessions
from turnkeeper.web.forms import form_fields
from turnkeeper.web.gates import GateOrigins, gate_row
from turnkeeper.web.render import HERE, path_part, render

router = APIRouter(include_in_schema=False)
Store = Annotated[EventStore, Depends(store_of)]
Part = Annotated[Literal["live"] | None, Query(description="Only the part htmx refreshes.")]
# A goal page's window over its todos and evidence records (goal_pages.py).
Offset = Annotated[int, Query(ge=0, le=2**53, description="Todos and evidence to skip.")]
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
# The notice for each control: what it did, then the session's status (or, for a
# revert, the operation's outcome), in words that do not repeat each other.
DONE_WORDS: Final = {"stop": "stopped", "resume": "resumed", "crash": "marked crashed"}
REVERT_WORDS: Final = {
    "reverted": "reverted to the last snapshot; the session is suspended (resume it to go on)",
    "unchanged": "nothing to revert: the session is not crashed",
    "superseded": "the revert was superseded by a delete",
    "pending": "the revert is under way",
}
# A decision's buttons: a word the agent reads back (``approved``, ``rejected``), or
# ``answer``: the words typed in the ``answer`` field are the decision.
CHOICES: Final = ("approved", "rejected", "answer")
Form = Annotated[dict[str, str], Depends(form_fields)]


@router.get("/", response_class=HTMLResponse)
@access("read")
@page()
def sessions_page(
    request: Request, store: Store, status: StatusFilter = None, part: Part = None
) -> Response:
    """Every session (filtered by status) and every goal with its audit."""
    data = views.sessions_view(store, status, gate_origins(request))
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
    notice = _notice(done, result)
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


def _notice(done: str | None, result: str | None) -> str | None:
    if not done or not result:
        return None
    if done == "revert":
        return REVERT_WORDS.get(result, result)
    return f"{DONE_WORDS.get(done, done)}: the session is {result}"


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


def gate_origins(request: Request) -> GateOrigins:
    found: GateOrigins = request.app.state.gate_origins
    return found


@router.get("/goals/{goal_id}", response_class=HTMLResponse)
@access("read")
@page()
def goal_page(
    request: Request, goal_id: IdPath, store: Store, part: Part = None, offset: Offset = 0
) -> Response:
    """A goal: todos, gates, monitors, evidence (a page of each) and its terminal audit."""
    principal = request.state.principal
    data = views.goal_view(store, goal_id, gate_origins(request), principal, offset)
    live = f"/goals/{data['state'].goal.id}?part=live&offset={offset}"
    template = "_goal_live.html" if part == "live" else "goal.html"
    may = views.may_decide(request.state.principal)
    return render(request, template, live_url=live, may_decide=may, **data)


@router.get("/sessions/{session_id}/goal", response_class=HTMLResponse)
@access("read", "session")
@page()
def session_goal_page(
    request: Request,
    session_id: SessionPath,
    store: Store,
    part: Part = None,
    offset: Offset = 0,
) -> Response:
    """The goal of a session: the one goal a share of that session may read."""
    state = routes_sessions.session_show(session_id, store)
    principal = request.state.principal
    data = views.goal_view(store, state.goal_id, gate_origins(request), principal, offset)
    live = f"/sessions/{session_id}/goal?part=live&offset={offset}"
    template = "_goal_live.html" if part == "live" else "goal.html"
    may = views.may_decide(request.state.principal)
    return render(request, template, live_url=live, may_decide=may, **data)


@router.get("/gates/{gate_id}", response_class=HTMLResponse)
@access("read")
@page()
def gate_page(
    request: Request,
    gate_id: IdPath,
    store: Store,
    done: Annotated[Literal["resolved"] | None, Query()] = None,
) -> Response:
    """A gate: its question, what opened it, and the decision (or the form to take it)."""
    row = gate_row(store, gate_origins(request), gate_id)
    notice = "decided" if done and row.gate.resolution else None
    may = views.may_decide(request.state.principal)
    return render(request, "gate.html", row=row, notice=notice, may_decide=may)


@router.post("/gates/{gate_id}/resolve")
@access("update")
@page()
def resolve_gate(request: Request, gate_id: IdPath, store: Store, form: Form) -> Response:
    """Decide a gate as the signed-in caller: ``gate_resolve``, the API's own route,
    with the caller as ``by`` (who the API's log names: ``admin``)."""
    caller: Principal = request.state.principal
    decision = _decision(form)
    with checked_input():
        body = routes_goals.GateResolve(decision=decision, by=caller.label, payload={"via": "web"})
    gate = routes_goals.gate_resolve(gate_id, body, store)
    target = f"/gates/{path_part(gate.id)}?done=resolved"
    return Response(status_code=200, headers={"HX-Redirect": target, "Cache-Control": "no-store"})


def _decision(form: dict[str, str]) -> str:
    """The decision a gate's form says: the button's word, or the typed answer."""
    choice = form.get("choice", "")
    if choice not in CHOICES:
        raise InvalidArgument(
            "a decision is approved, rejected or an answer in words", reason="bad_decision"
        )
    if choice != "answer":
        return choice
    answer = form.get("answer", "").strip()
    if not answer:
        raise InvalidArgument("type the answer before sending it", reason="empty_decision")
    return answer


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

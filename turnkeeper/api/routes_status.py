"""The project as a whole: status, the caller, shares, metrics, the API's description."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from turnkeeper.api.access import access
from turnkeeper.api.deps import Body, IdPath, SessionPath, principal_of, root_of, store_of
from turnkeeper.api.metrics import render
from turnkeeper.api.routes_sessions import SessionAnswer, resolve_session, session_answer
from turnkeeper.errors import Unavailable
from turnkeeper.kernel import TerminalAudit
from turnkeeper.notify.health import NotificationStatus, notification_status
from turnkeeper.runtime.control.controller_health import (
    ControllerHealth,
    health_json,
    read_controller_health,
)
from turnkeeper.runtime.services.access import AccessService, Principal, ShareMode, share_json
from turnkeeper.runtime.services.extension_settings import ExtensionSettings
from turnkeeper.runtime.services.extension_states import ExtensionStatus, extension_states
from turnkeeper.runtime.services.goal_reads import GOAL_KIND, audit_of, goal_states
from turnkeeper.runtime.services.project import Project as ProjectDir
from turnkeeper.runtime.services.sessions import SESSION_KIND, SessionService
from turnkeeper.runtime.services.workspace_claims import check_workspaces_not_ahead
from turnkeeper.store.base import EventStore

router = APIRouter(prefix="/v1", tags=["project"])
plain = APIRouter(tags=["project"])
Store = Annotated[EventStore, Depends(store_of)]
Root = Annotated[Path | None, Depends(root_of)]


class GoalSummary(BaseModel):
    id: str
    title: str
    status: str
    todos: int
    audit: TerminalAudit


class StatusAnswer(BaseModel):
    goals: list[GoalSummary]
    sessions: list[SessionAnswer]
    # Installed, enabled, ready (doctor on the server's machine) and authorised.
    extensions: list[ExtensionStatus]
    # The controllers (``run``) running on the server's machine and their background
    # threads: "lease keeper down since ..." (runtime/control/controller_health.py).
    controllers: list[ControllerHealth] = []
    # Webhook endpoints whose deliveries are failing (docs/notifications.md).
    notifications: NotificationStatus = NotificationStatus()


class ShareView(BaseModel):
    share_id: str
    session_id: str
    mode: ShareMode
    created_at: str
    revoked_at: str | None


class ShareList(BaseModel):
    shares: list[ShareView]


class ShareCreate(Body):
    mode: ShareMode


class ShareCreated(BaseModel):
    share: ShareView
    token: str


class Caller(BaseModel):
    kind: Literal["admin", "share"]
    share: ShareView | None = None


@router.get("/status", response_model=StatusAnswer)
@access("read")
def status(store: Store, root: Root = None) -> StatusAnswer:
    """Everything in flight: every goal with its audit, every session (``status``), the
    running controllers' background threads. DATA_LOSS when the log holds less than a
    workspace's snapshots record; UNAVAILABLE while the database does not answer, with
    the controllers in its details (what they say holds then). Called without a root
    (the web view's pages), no controllers are read."""
    controllers = read_controller_health(ProjectDir(root).state_dir) if root else []
    try:
        return _status(store, controllers)
    except Unavailable as down:
        if controllers:
            down.details["controllers"] = health_json(controllers)
        raise


def _status(store: EventStore, controllers: list[ControllerHealth]) -> StatusAnswer:
    # Goals and sessions from one read of the projections, each goal audited from the
    # state listed (as the CLI's ``status``): not a listing per kind and a read per goal.
    listed = store.list_projections_of((GOAL_KIND, SESSION_KIND))
    rows = [
        GoalSummary(
            id=state.goal.id,
            title=state.goal.title,
            status=state.goal.status.value,
            todos=len(state.todos),
            audit=audit_of(store, state),
        )
        for state in goal_states(listed[GOAL_KIND])
    ]
    sessions = SessionService.states_of(listed[SESSION_KIND])
    check_workspaces_not_ahead(store, sessions)
    extensions = extension_states(
        ExtensionSettings(store).state(),
        [(s.session_id, s.status, s.host_kind, s.host_config) for s in sessions],
    )
    return StatusAnswer(
        goals=rows,
        sessions=[session_answer(s) for s in sessions],
        extensions=extensions,
        controllers=controllers,
        notifications=notification_status(store),
    )


@router.get("/whoami", response_model=Caller)
@access("read", "any")
def whoami(request: Request) -> Caller:
    """The caller: the admin, or a share (its session and mode)."""
    principal: Principal = principal_of(request)
    share = ShareView(**share_json(principal.share)) if principal.share is not None else None
    return Caller(kind=principal.kind, share=share)


@router.get("/shares", response_model=ShareList)
@access("admin")
def shares_list(store: Store) -> ShareList:
    """Every share, revoked ones too (``share list``); tokens are never shown again."""
    shares = AccessService(store).list_shares()
    return ShareList(shares=[ShareView(**share_json(s)) for s in shares])


@router.post("/sessions/{session_id}/shares", response_model=ShareCreated)
@access("admin", "session")
def share_create(session_id: SessionPath, body: ShareCreate, store: Store) -> ShareCreated:
    """Share one session, read-only or with update rights (``share create``); the
    token is in the answer and nowhere else."""
    made = AccessService(store).create_share(resolve_session(store, session_id), body.mode)
    return ShareCreated(share=ShareView(**share_json(made.share)), token=made.token)


@router.delete("/shares/{share_id}", response_model=ShareView)
@access("admin")
def share_revoke(share_id: IdPath, store: Store) -> ShareView:
    """Revoke a share: its token stops working (``share revoke``)."""
    return ShareView(**share_json(AccessService(store).revoke_share(share_id)))


@router.get("/openapi.json", include_in_schema=False)
@access("read", "any")
def openapi(request: Request) -> JSONResponse:
    """This API's OpenAPI description."""
    return JSONResponse(request.app.openapi())


@plain.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
@access("admin")
def metrics(request: Request) -> Response:
    """Operator signals in Prometheus' text format (see docs/api.md)."""
    body = render(request.app.state.metrics)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

"""Every route of the app, for every kind of caller: the status each must get.

The callers: no token, a read-only share of the session, an update share of
*another* session, an update share of the session, and the admin token. The
routes are enumerated from the app itself, so a route added without a row here
fails the test. Every refused call (401, 403) is made with a digest of every row
of the store taken before and after it: a refusal writes nothing, on either backend.
Then an app with a route that declares no access mode cannot even be built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import APIRouter
from fastapi.routing import APIRoute

from tests.api.conftest import ADMIN, GOAL, ApiProject
from turnkeeper.api.access import UndeclaredRouteError, access, app_routes
from turnkeeper.kernel.proposals import AddMonitor, OpenGate
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.server.app import ROUTERS, build_app
from turnkeeper.web import page_kind

# (method, route) -> (path with {placeholders}, JSON body, scope kind, mode, admin status)
# Scope kinds: "session" routes name the shared session; "project" and "any" do not.
ROUTES: dict[tuple[str, str], tuple[str, Any, str, str, int]] = {
    ("GET", "/v1/status"): ("/v1/status", None, "project", "read", 200),
    ("GET", "/v1/whoami"): ("/v1/whoami", None, "any", "read", 200),
    ("GET", "/v1/openapi.json"): ("/v1/openapi.json", None, "any", "read", 200),
    ("GET", "/v1/shares"): ("/v1/shares", None, "project", "admin", 200),
    ("POST", "/v1/sessions/{session_id}/shares"): (
        "/v1/sessions/{sid}/shares", {"mode": "read"}, "session", "admin", 200
    ),
    ("DELETE", "/v1/shares/{share_id}"): ("/v1/shares/{share}", None, "project", "admin", 200),
    ("GET", "/v1/goals"): ("/v1/goals", None, "project", "read", 200),
    ("POST", "/v1/goals"): ("/v1/goals", {"title": "another", "goal_id": "g2"}, "project",
                            "update", 200),
    ("GET", "/v1/goals/{goal_id}"): ("/v1/goals/g", None, "project", "read", 200),
    ("GET", "/v1/goals/{goal_id}/audit"): ("/v1/goals/g/audit", None, "project", "read", 200),
    ("POST", "/v1/goals/{goal_id}/close"): (
        "/v1/goals/g2/close", {"summary": "nothing to do"}, "project", "update", 200
    ),
    ("POST", "/v1/goals/{goal_id}/criteria/{criterion_id}/met"): (
        "/v1/goals/g/criteria/c1/met", {"evidence_ids": ["ev-none"]}, "project", "update", 404
    ),
    ("POST", "/v1/goals/{goal_id}/proposals"): (
        "/v1/goals/g/proposals", {"kind": "note", "author": "me", "text": "hi"}, "project",
        "update", 200,
    ),
    ("GET", "/v1/goals/{goal_id}/todos"): ("/v1/goals/g/todos", None, "project", "read", 200),
    ("POST", "/v1/goals/{goal_id}/todos"): (
        "/v1/goals/g/todos", {"title": "more", "todo_id": "t9"}, "project", "update", 200
    ),
    ("GET", "/v1/todos/{todo_id}"): ("/v1/todos/t2", None, "project", "read", 200),
    ("POST", "/v1/todos/{todo_id}/claim"): ("/v1/todos/t9/claim", {}, "project", "update", 200),
    ("POST", "/v1/todos/{todo_id}/release"): (
        "/v1/todos/t9/release", {"epoch": 99}, "project", "update", 409
    ),
    ("POST", "/v1/todos/{todo_id}/done"): (
        "/v1/todos/t9/done", {"epoch": 99}, "project", "update", 409
    ),
    ("GET", "/v1/goals/{goal_id}/gates"): ("/v1/goals/g/gates", None, "project", "read", 200),
    ("POST", "/v1/goals/{goal_id}/gates"): (
        "/v1/goals/g/gates", {"title": "approve?", "blocking": False}, "project", "update", 200
    ),
    ("POST", "/v1/gates/{gate_id}/resolve"): (
        "/v1/gates/{gate}/resolve", {"decision": "approved", "by": "me"}, "project", "update",
        200,
    ),
    ("GET", "/v1/goals/{goal_id}/monitors"): (
        "/v1/goals/g/monitors", None, "project", "read", 200
    ),
    ("POST", "/v1/goals/{goal_id}/monitors"): (
        "/v1/goals/g/monitors", {"target": "ci", "cadence_seconds": 60}, "project", "update", 200
    ),
    ("POST", "/v1/monitors/{monitor_id}/readback"): (
        "/v1/monitors/{monitor}/readback", {"value": {"ci": "green"}}, "project", "update", 200
    ),
    ("GET", "/v1/goals/{goal_id}/evidence"): (
        "/v1/goals/g/evidence", None, "project", "read", 200
    ),
    ("GET", "/v1/sessions"): ("/v1/sessions", None, "project", "read", 200),
    ("POST", "/v1/sessions"): (
        "/v1/sessions", {"goal_id": "g", "host": "scripted"}, "project", "update", 200
    ),
    ("GET", "/v1/sessions/{session_id}"): ("/v1/sessions/{sid}", None, "session", "read", 200),
    ("GET", "/v1/sessions/{session_id}/turns"): (
        "/v1/sessions/{sid}/turns", None, "session", "read", 200
    ),
    ("GET", "/v1/sessions/{session_id}/turns/{turn_id}"): (
        "/v1/sessions/{sid}/turns/{turn}", None, "session", "read", 200
    ),
    ("GET", "/v1/sessions/{session_id}/snapshots"): (
        "/v1/sessions/{sid}/snapshots", None, "session", "read", 200
    ),
    ("GET", "/v1/sessions/{session_id}/events"): (
        "/v1/sessions/{sid}/events?follow=false", None, "session", "read", 200
    ),
    ("POST", "/v1/sessions/{session_id}/turns/{turn_id}/recover"): (
        "/v1/sessions/{sid}/turns/{turn}/recover", None, "session", "update", 412
    ),
    ("POST", "/v1/sessions/{session_id}/stop"): (
        "/v1/sessions/{sid}/stop", {"reason": "matrix"}, "session", "update", 200
    ),
    ("POST", "/v1/sessions/{session_id}/resume"): (
        "/v1/sessions/{sid}/resume", None, "session", "update", 200
    ),
    ("POST", "/v1/sessions/{session_id}/crash"): (
        "/v1/sessions/{sid}/crash", None, "session", "update", 200
    ),
    ("POST", "/v1/sessions/{session_id}/revert"): (
        "/v1/sessions/{sid}/revert", None, "session", "update", 200
    ),
    ("GET", "/v1/operations/{request_id}"): (
        "/v1/operations/create-1", None, "project", "read", 200
    ),
    ("DELETE", "/v1/sessions/{session_id}"): (
        "/v1/sessions/{sid}", None, "session", "delete", 200
    ),
    ("GET", "/metrics"): ("/metrics", None, "project", "admin", 200),
}  # fmt: skip
CALLERS = ("none", "read_share", "other_share", "update_share", "admin")


def expected(caller: str, scope: str, mode: str, admin_status: int) -> int | None:
    """The status ``caller`` must get; None: allowed, its answer depends on the state
    the earlier allowed calls left (never 401, 403 or 5xx)."""
    if caller == "none":
        return 401
    if caller == "admin":
        return admin_status
    if scope == "any":
        return 200
    if scope == "project" or caller == "other_share":
        return 403
    if mode in ("delete", "admin") or (caller == "read_share" and mode != "read"):
        return 403
    return 200 if mode == "read" else None


@dataclass
class Context:
    sid: str
    turn: str
    gate: str
    monitor: str
    share: str

    def path(self, template: str) -> str:
        return template.format(
            sid=self.sid, turn=self.turn, gate=self.gate, monitor=self.monitor, share=self.share
        )


def _setup(project: ApiProject) -> tuple[Context, dict[str, str | None]]:
    project.run_turns(1)  # a real turn: its id, events, snapshot
    turn = project.client.get(
        f"/v1/sessions/{project.session_id}/turns", headers=project.headers()
    ).json()["turns"][0]["turn_id"]
    goals = GoalService(project.store)
    goals.submit(GOAL, OpenGate(gate_id="gate-1", title="ok?", blocking=False))
    goals.submit(GOAL, AddMonitor(monitor_id="mon-1", target="x", cadence_seconds=60))
    other = project.new_session("create-other")
    tokens: dict[str, str | None] = {
        "none": None,
        "read_share": project.share(project.session_id, "read"),
        "other_share": project.share(other, "update"),
        "update_share": project.share(project.session_id, "update"),
        "admin": ADMIN,
    }
    spare = project.client.post(
        f"/v1/sessions/{other}/shares", json={"mode": "read"}, headers=project.headers()
    ).json()["share"]["share_id"]
    return Context(project.session_id, turn, "gate-1", "mon-1", spare), tokens


def _call(project: ApiProject, method: str, path: str, body: Any, token: str | None) -> int:
    headers = project.headers(token)
    if method in ("POST", "DELETE") and ("revert" in path or method == "DELETE"):
        headers["Idempotency-Key"] = f"matrix-{method}-{len(path)}"
    response = project.client.request(method, path, json=body, headers=headers)
    return int(response.status_code)


def test_every_route_answers_every_caller_as_declared(api_project: ApiProject) -> None:
    project = api_project
    served = {
        (method, route.path)
        for route in app_routes(project.app)
        # The web view's pages have a matrix of their own (tests/web/test_page_access.py).
        if isinstance(route, APIRoute) and page_kind(route) is None
        for method in route.methods or ()
    }
    assert served == set(ROUTES), served ^ set(ROUTES)
    ctx, tokens = _setup(project)
    refused = allowed = 0
    # Refusals first, each between two digests of the whole store.
    for (method, _route), (template, body, scope, mode, ok) in ROUTES.items():
        for caller in CALLERS:
            want = expected(caller, scope, mode, ok)
            if want not in (401, 403):
                continue
            before = project.digest()
            got = _call(project, method, ctx.path(template), body, tokens[caller])
            assert got == want, (method, template, caller)
            assert project.digest() == before, f"{method} {template} by {caller} wrote"
            refused += 1
    # Then what each share may do, then the admin (whose delete comes last).
    wrong: list[tuple[str, str, str, int]] = []
    for caller in ("read_share", "update_share", "admin"):
        for (method, _route), (template, body, scope, mode, ok) in ROUTES.items():
            want = expected(caller, scope, mode, ok)
            if want in (401, 403):
                continue
            got = _call(project, method, ctx.path(template), body, tokens[caller])
            if (got in (401, 403) or got >= 500) if want is None else got != want:
                wrong.append((method, template, caller, got))
            allowed += 1
    assert wrong == []
    assert refused > 100 and allowed > 40
    # The session is deleted now: its shares stop working, even for harmless routes.
    for caller in ("read_share", "update_share"):
        answer = project.client.get("/v1/whoami", headers=project.headers(tokens[caller]))
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["reason"] == "session_deleted"


def test_a_revoked_share_and_an_unknown_token_are_401(api_project: ApiProject) -> None:
    project = api_project
    sid = project.session_id
    made = project.client.post(
        f"/v1/sessions/{sid}/shares", json={"mode": "read"}, headers=project.headers()
    ).json()
    token, share_id = made["token"], made["share"]["share_id"]
    assert project.client.get(f"/v1/sessions/{sid}", headers=project.headers(token)).is_success
    assert project.client.delete(f"/v1/shares/{share_id}", headers=project.headers()).is_success
    for bad in (token, "tks_not-a-real-token-at-all", ""):
        headers = {"Authorization": f"Bearer {bad}"} if bad else {"Authorization": "Basic x"}
        answer = project.client.get(f"/v1/sessions/{sid}", headers=headers)
        assert answer.status_code == 401, answer.text
        assert answer.headers["www-authenticate"] == "Bearer"
        body = answer.json()["error"]
        assert (body["code"], body["reason"]) == ("PERMISSION_DENIED", "invalid_token")
    # A share names its session in full: a prefix is refused, not resolved.
    update = project.share(sid, "update")
    answer = project.client.get(f"/v1/sessions/{sid[:8]}", headers=project.headers(update))
    assert answer.status_code == 403


def test_an_undeclared_route_is_refused_when_the_app_is_built(api_project: ApiProject) -> None:
    extra = APIRouter()

    @extra.get("/v1/forgotten")
    def forgotten() -> dict[str, str]:
        return {"no": "access mode"}

    with pytest.raises(UndeclaredRouteError, match="/v1/forgotten declares no access mode"):
        build_app(api_project.store, api_project.root, [*ROUTERS, extra])

    scoped = APIRouter()

    @scoped.get("/v1/things/{thing}")
    @access("read", "session")
    def thing(thing: str) -> dict[str, str]:
        return {"thing": thing}

    with pytest.raises(UndeclaredRouteError, match="session scoped"):
        build_app(api_project.store, api_project.root, [*ROUTERS, scoped])

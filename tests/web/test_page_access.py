"""Every page route of the web view, for every kind of caller, on each backend.

The same callers and the same rule as the API's matrix (tests/api/test_access_matrix.py):
no web session, a read-only share of the session, an update share of another
session, an update share of the session, the admin. Each signs in through its link
(``/?token=``) and then uses only its cookie. The routes are enumerated from the app,
so a page route added without a row here fails. Every refusal is made between two
digests of every row of the store: it writes nothing. Then the cross-site defences:
a state-changing request without the web session's CSRF token, with a wrong one, or
from another origin is refused (403) however good its cookie, and writes nothing.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from tests.api.conftest import ADMIN, GOAL, ApiProject
from tests.api.test_access_matrix import CALLERS, expected
from turnkeeper.api.access import app_routes, declared
from turnkeeper.kernel.proposals import OpenGate
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.web import page_kind

# (method, route) -> (path with {placeholders}, scope kind, mode, admin status)
PAGES: dict[tuple[str, str], tuple[str, str, str, int]] = {
    ("GET", "/"): ("/", "project", "read", 200),
    ("GET", "/sessions/{session_id}"): ("/sessions/{sid}", "session", "read", 200),
    ("GET", "/sessions/{session_id}/events"): (
        "/sessions/{sid}/events?follow=false", "session", "read", 200
    ),
    ("GET", "/goals/{goal_id}"): ("/goals/g", "project", "read", 200),
    ("GET", "/sessions/{session_id}/goal"): ("/sessions/{sid}/goal", "session", "read", 200),
    ("GET", "/gates/{gate_id}"): ("/gates/gate-1", "project", "read", 200),
    ("POST", "/gates/{gate_id}/resolve"): ("/gates/gate-1/resolve", "project", "update", 200),
    ("GET", "/operations"): ("/operations", "project", "read", 200),
    ("POST", "/sessions/{session_id}/stop"): ("/sessions/{sid}/stop", "session", "update", 200),
    ("POST", "/sessions/{session_id}/resume"): (
        "/sessions/{sid}/resume", "session", "update", 200
    ),
    ("POST", "/sessions/{session_id}/crash"): ("/sessions/{sid}/crash", "session", "update", 200),
    ("POST", "/sessions/{session_id}/revert"): (
        "/sessions/{sid}/revert", "session", "update", 200
    ),
    ("POST", "/sessions/{session_id}/delete"): (
        "/sessions/{sid}/delete", "session", "delete", 200
    ),
    ("POST", "/logout"): ("/logout", "any", "read", 200),
    ("GET", "/static/{name}"): ("/static/htmx.min.js", "public", "read", 200),
}  # fmt: skip
# Run last (in this order): they end the session or the web session.
LAST = (("POST", "/sessions/{session_id}/delete"), ("POST", "/logout"))


class Browser:
    """A caller with a cookie jar of its own, signed in through its link."""

    def __init__(self, project: ApiProject, token: str | None) -> None:
        self.client = TestClient(project.app)
        self.csrf = ""
        if token is None:
            return
        landed = self.client.get(f"/?token={token}", follow_redirects=False)
        assert landed.status_code == 303, landed.text
        cookie = landed.headers["set-cookie"]
        assert "HttpOnly" in cookie and "samesite=strict" in cookie.lower(), cookie
        assert token not in cookie and token not in landed.headers["location"]
        page = self.client.get(landed.headers["location"])
        assert page.status_code == 200, page.text
        found = re.search(r"hx-headers='([^']+)'", page.text)
        assert found is not None
        self.csrf = json.loads(found.group(1))["X-CSRF-Token"]

    def call(self, method: str, path: str, **headers: str) -> int:
        sent = {"X-CSRF-Token": self.csrf, **headers} if method == "POST" else dict(headers)
        if method == "POST" and path.endswith(("/revert", "/delete")):
            sent.setdefault("Idempotency-Key", f"page-{method}-{path.rsplit('/', 1)[-1]}")
        # A gate's decision is a form (as the gate page's htmx posts it).
        form = {"choice": "approved"} if path.endswith("/resolve") else None
        return int(self.client.request(method, path, headers=sent, data=form).status_code)


def _want(caller: str, scope: str, mode: str, ok: int) -> int | None:
    return 200 if scope == "public" else expected(caller, scope, mode, ok)


def test_every_page_answers_every_caller_as_declared(api_project: ApiProject) -> None:
    project = api_project
    served = {
        (method, route.path): declared(route)
        for route in app_routes(project.app)
        if isinstance(route, APIRoute) and page_kind(route) is not None
        for method in route.methods or ()
    }
    assert set(served) == set(PAGES), set(served) ^ set(PAGES)
    for key, (_path, scope, mode, _ok) in PAGES.items():
        found = served[key]
        assert found is not None and found.mode == mode, key
        assert found.scope == ("any" if scope == "public" else scope), key
    project.run_turns(1)
    GoalService(project.store).submit(GOAL, OpenGate(gate_id="gate-1", title="ok?"))
    other = project.new_session("create-other")
    tokens: dict[str, str | None] = {
        "none": None,
        "read_share": project.share(project.session_id, "read"),
        "other_share": project.share(other, "update"),
        "update_share": project.share(project.session_id, "update"),
        "admin": ADMIN,
    }
    callers = {name: Browser(project, tokens[name]) for name in CALLERS}
    path_of = {key: value[0].format(sid=project.session_id) for key, value in PAGES.items()}
    refused = 0
    for key, (_path, scope, mode, ok) in PAGES.items():
        for caller in CALLERS:
            want = _want(caller, scope, mode, ok)
            if want not in (401, 403):
                continue
            before = project.digest()
            got = callers[caller].call(key[0], path_of[key])
            assert got == want, (key, caller, got)
            assert project.digest() == before, f"{key} by {caller} wrote"
            refused += 1
    wrong: list[tuple[str, str, str, int]] = []
    order = [k for k in PAGES if k not in LAST] + list(LAST)
    for caller in ("none", "read_share", "update_share", "admin"):
        for key in order:
            _path, scope, mode, ok = PAGES[key]
            want = _want(caller, scope, mode, ok)
            if want in (401, 403) or (key in LAST and caller != "admin"):
                continue
            got = callers[caller].call(key[0], path_of[key])
            if (got in (401, 403) or got >= 500) if want is None else got != want:
                wrong.append((*key, caller, got))
    assert wrong == []
    assert refused > 25
    # Signed out: the cookie opens nothing any more. The deleted session's shares: 403.
    assert callers["admin"].call("GET", "/") == 401
    answer = callers["read_share"].client.get(f"/sessions/{project.session_id}")
    assert answer.status_code == 403 and "session_deleted" in answer.text


def test_a_state_change_needs_the_csrf_token_and_this_origin(api_project: ApiProject) -> None:
    project = api_project
    project.run_turns(1)
    sid = project.session_id
    updater = Browser(project, project.share(sid, "update"))
    admin = Browser(project, ADMIN)
    forged: list[dict[str, Any]] = [
        {"X-CSRF-Token": ""},
        {"X-CSRF-Token": "not-the-token"},
        {"X-CSRF-Token": admin.csrf},  # another web session's token
        {"Origin": "http://evil.example"},
        {"Sec-Fetch-Site": "cross-site"},
    ]
    for path in (f"/sessions/{sid}/crash", f"/sessions/{sid}/stop", f"/sessions/{sid}/revert"):
        for headers in forged:
            before = project.digest()
            sent = {"X-CSRF-Token": updater.csrf, "Idempotency-Key": "forged-1", **headers}
            answer = updater.client.post(path, headers=sent)
            assert answer.status_code == 403, (path, headers, answer.text)
            assert "csrf" in answer.text or "cross_site" in answer.text
            assert project.digest() == before, (path, headers)
    # A gate's decision is the admin's: forged, it is refused the same way.
    GoalService(project.store).submit(GOAL, OpenGate(gate_id="gate-1", title="ok?"))
    admin_forged = [{**h, "X-CSRF-Token": h.get("X-CSRF-Token", admin.csrf)} for h in forged]
    admin_forged[2]["X-CSRF-Token"] = updater.csrf  # another web session's token
    for headers in admin_forged:
        before = project.digest()
        answer = admin.client.post(
            "/gates/gate-1/resolve", headers=headers, data={"choice": "approved"}
        )
        assert answer.status_code == 403, (headers, answer.text)
        assert "csrf" in answer.text or "cross_site" in answer.text
        assert project.digest() == before, headers
    # With its token and from this origin, the same request goes through.
    origin = {"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"}
    assert updater.call("POST", f"/sessions/{sid}/crash", **origin) == 200
    shown = project.client.get(f"/v1/sessions/{sid}", headers=project.headers()).json()
    assert shown["status"] == "crashed"


def test_a_login_link_with_an_unknown_token_is_refused(api_project: ApiProject) -> None:
    client = TestClient(api_project.app)
    answer = client.get("/?token=tka_not-a-token-of-this-project", follow_redirects=False)
    assert answer.status_code == 401
    assert "set-cookie" not in answer.headers
    assert "text/html" in answer.headers["content-type"]
    assert client.get("/", follow_redirects=False).status_code == 401
    # The API still answers programs in JSON.
    assert client.get("/v1/status").json()["error"]["reason"] == "no_token"


def test_a_decision_in_words_is_recorded_as_typed(api_project: ApiProject) -> None:
    """The gate page's other form: the answer typed is the decision, by the caller;
    an empty answer or an unknown choice is refused (400) and writes nothing."""
    project = api_project
    GoalService(project.store).submit(GOAL, OpenGate(gate_id="db", title="Which database?"))
    admin = Browser(project, ADMIN)
    headers = {"X-CSRF-Token": admin.csrf}
    for form in ({"choice": "answer", "answer": "  "}, {"choice": "maybe"}, {}):
        before = project.digest()
        answer = admin.client.post("/gates/db/resolve", headers=headers, data=form)
        assert answer.status_code == 400, (form, answer.text)
        assert "text/html" in answer.headers["content-type"]
        assert project.digest() == before, form
    typed = {"choice": "answer", "answer": "PostgreSQL 16, the team knows it"}
    answer = admin.client.post("/gates/db/resolve", headers=headers, data=typed)
    assert answer.status_code == 200 and answer.headers["HX-Redirect"] == "/gates/db?done=resolved"
    gate = project.client.get(f"/v1/goals/{GOAL}/gates", headers=project.headers()).json()[0]
    resolution = gate["resolution"]
    assert (resolution["decision"], resolution["by"]) == (
        "PostgreSQL 16, the team knows it",
        "admin",
    )
    # Decided once: a second decision is the kernel's refusal, as through the API.
    again = admin.client.post("/gates/db/resolve", headers=headers, data={"choice": "rejected"})
    assert again.status_code == 412 and "gate_already_resolved" in again.text

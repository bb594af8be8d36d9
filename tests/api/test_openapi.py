"""The OpenAPI description: the checked-in copy is what the app serves, every route the
server serves is called by schemathesis (or named in :data:`NOT_GENERATED` with the
reason it is not), and no call it makes gets a server error, on each backend (a real
uvicorn, a real project).

Schemathesis runs as a user runs it, its own command (``schemathesis run``) against
the live server, over three phases of every operation:

* **examples** — the description's own examples;
* **coverage** — boundary values of every parameter and body field, valid and not:
  a string at its ``maxLength`` and one past it (a 4,096-character workspace path),
  numbers at their bounds, required fields missing, wrong types, unknown methods;
* **fuzzing** — random requests, valid and not, :data:`EXAMPLES` per operation.

Every answer is checked: never a 5xx, status, headers and content type documented,
the body valid against its schema, invalid data refused. Left out is the check that
every schema-valid request is accepted (``positive_data_acceptance``): the kernel
refuses, as INVALID_ARGUMENT, values no JSON schema spells out (an empty title after
trimming, an unknown proposal kind, a cadence it finds out of range, a workspace path
the system cannot use). The API is run twice: with generated ids in its paths, and
with the ids of what the project holds (its session, goal, todo, turn), so that calls
reach each route's own logic rather than stopping at NOT_FOUND. Each run's JSON
report is read: every operation tested, no failure, no error.

The web view's pages are in no description (HTML for a browser, not the API): their
description is generated here from their own route definitions, and they are called
signed in as a browser is (its session cookie and CSRF token), checked for never
answering a server error.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from tests.api.conftest import ADMIN, GOAL, ApiProject, make_project, served, write_turn
from turnkeeper.api.access import app_routes
from turnkeeper.runtime.services.turn_listing import list_turns
from turnkeeper.web.auth import COOKIE, CSRF_HEADER, page_kind

CHECKED_IN = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
# Random requests per operation in the fuzzing phase (the coverage phase makes its own
# set of boundary cases, however many the description's constraints give).
EXAMPLES: Final = 30
# The same on the ids of what the project holds (see the test).
EXAMPLES_ON_REAL_IDS: Final = 12
SEED: Final = "38"  # one seed: a failure found once is found again
RUN_TIMEOUT: Final = 240.0
AUTH: Final = f"Authorization: Bearer {ADMIN}"

# (method, path) of a route the server serves that no generated request calls: why.
NOT_GENERATED: Final = {
    ("GET", "/v1/sessions/{session_id}/events"): (
        "the live event stream follows a session until the client hangs up: every "
        "generated call would wait out its timeout (tests/api/test_events_sse.py)"
    ),
    ("GET", "/sessions/{session_id}/events"): (
        "the web view's live host log, the same stream for a browser (tests/web/)"
    ),
    ("POST", "/logout"): (
        "ends the browser session every other page call is signed in with (tests/web/)"
    ),
    ("GET", "/v1/openapi.json"): (
        "the description itself: compared with the checked-in copy below"
    ),
}


def test_the_checked_in_description_is_the_served_one(api_project: ApiProject) -> None:
    answer = api_project.client.get("/v1/openapi.json", headers=api_project.headers())
    assert answer.status_code == 200
    served_text = json.dumps(answer.json(), indent=2, sort_keys=True) + "\n"
    assert CHECKED_IN.read_text() == served_text, (
        "docs/openapi.json is stale: regenerate it with "
        "`.venv/bin/python -m turnkeeper.server.openapi > docs/openapi.json`"
    )


def _routes(app: FastAPI) -> list[APIRoute]:
    found = []
    for route in app_routes(app):
        assert isinstance(route, APIRoute), route  # the app refuses any other at build time
        found.append(route)
    return found


def _served(app: FastAPI) -> set[tuple[str, str]]:
    """Every (method, path) the app serves (HEAD is GET's, answered by Starlette)."""
    return {(m, r.path) for r in _routes(app) for m in (r.methods or ()) if m != "HEAD"}


def _operations(description: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in description["paths"].items()
        for method in item
        if method in ("get", "put", "post", "delete", "patch")
    }


def _pages_description(app: FastAPI) -> dict[str, Any]:
    """The web view's routes described as the API's are, by FastAPI's own generator
    over copies of them marked for a description (the app's routes stay unmarked)."""
    pages = []
    for route in _routes(app):
        if page_kind(route) is not None:
            described = copy.copy(route)
            described.include_in_schema = True
            pages.append(described)
    return get_openapi(title="turnkeeper web view", version="test", routes=pages)


def _api_description(project: ApiProject) -> dict[str, Any]:
    answer = project.client.get("/v1/openapi.json", headers=project.headers())
    assert answer.status_code == 200
    description: dict[str, Any] = answer.json()
    return description


def test_every_served_route_is_generated_or_named(api_project: ApiProject) -> None:
    api = _operations(_api_description(api_project))
    pages = _operations(_pages_description(api_project.app))
    served_routes = _served(api_project.app)
    assert api.isdisjoint(pages)
    assert served_routes == api | pages | set(NOT_GENERATED), (
        "a route is neither generated by the checks below nor named in NOT_GENERATED: "
        f"{sorted(served_routes - api - pages - set(NOT_GENERATED))}; "
        f"named but not served: {sorted(set(NOT_GENERATED) - served_routes)}"
    )
    assert len(api) > 30 and len(pages) > 8


@pytest.fixture
def live(backend: str, tmp_path: Path) -> Iterator[tuple[ApiProject, str]]:
    """The project served: a turn, a snapshot and host events already recorded."""
    project = make_project(backend, tmp_path, [write_turn("write a", "a.txt", "A\n")])
    project.run_turns(1)
    try:
        with served(project.app) as base:
            yield project, base
    finally:
        project.client.close()
        project.store.close()


def _signed_in(base: str) -> list[str]:
    """The headers of a browser signed in with the admin token: the web session's
    cookie and its CSRF token (which the pages' htmx sends with a control)."""
    with httpx.Client(base_url=base, follow_redirects=False, timeout=30) as client:
        login = client.get("/", params={"token": ADMIN})
        assert login.status_code == 303, login.text[:300]
        cookie = login.cookies[COOKIE]
        page = client.get("/")  # with the cookie the login set
        assert page.status_code == 200, page.text[:300]
    found = re.search(r'"X-CSRF-Token": "([^"]+)"', page.text)  # the body's hx-headers
    assert found is not None, "the page carries no CSRF token"
    return [f"Cookie: {COOKIE}={cookie}", f"{CSRF_HEADER}: {found.group(1)}"]


def _schemathesis(
    workdir: Path,
    location: str,
    *options: str,
    examples: int = EXAMPLES,
    parameters: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``schemathesis run LOCATION OPTIONS`` over the three phases, with ``parameters``
    (name: value) given rather than generated; its JSON report."""
    workdir.mkdir()  # its own directory: no schemathesis.toml of anyone else's applies
    if parameters:
        lines = [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in parameters.items()]
        (workdir / "schemathesis.toml").write_text("[parameters]\n" + "\n".join(lines) + "\n")
    report = workdir / "report.json"
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "run",
        location,
        "--phases=examples,coverage,fuzzing",
        f"--max-examples={examples}",
        f"--seed={SEED}",
        "--request-timeout=30",
        "--continue-on-failure",
        "--report=json",
        f"--report-json-path={report}",
        *options,
    ]
    done = subprocess.run(
        command, cwd=workdir, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False
    )
    said = f"exit {done.returncode}\n{done.stdout[-12000:]}\n{done.stderr[-3000:]}"
    assert report.exists(), said
    found: dict[str, Any] = json.loads(report.read_text())
    assert done.returncode == 0 and found["failures"] == [] and found["errors"] == [], said
    assert found["complete"], said
    for phase in ("examples", "coverage", "fuzzing"):
        assert found["phases"][phase]["status"] in ("success", "skip"), (phase, said)
    assert found["phases"]["coverage"]["status"] == "success", said
    assert found["phases"]["fuzzing"]["status"] == "success", said
    return found


def test_no_generated_call_gets_a_server_error(
    live: tuple[ApiProject, str], tmp_path: Path
) -> None:
    project, base = live
    api = _operations(_api_description(project))
    pages_description = _pages_description(project.app)
    pages = _operations(pages_description)
    left_out = [f"--exclude-path={path}" for _, path in NOT_GENERATED]

    # The API: every check but positive_data_acceptance (see the module docstring).
    found = _schemathesis(
        tmp_path / "api",
        f"{base}/v1/openapi.json",
        f"--header={AUTH}",
        "--checks=all",
        "--exclude-checks=positive_data_acceptance",
        *left_out,
    )
    tested = found["operations"]["tested"]
    assert tested == len(api - set(NOT_GENERATED)), found["operations"]
    assert found["test_cases"]["generated"] > 20 * tested, found["test_cases"]

    # Again with the ids of what the project holds in the path (a random id is mostly
    # NOT_FOUND before the route's own logic runs): the session, its goal, todo and
    # turn, the create's request id.
    (turn,) = list_turns(project.store, project.session_id)
    real = {
        "path.session_id": project.session_id,
        "path.goal_id": GOAL,
        "path.criterion_id": "c1",
        "path.todo_id": "t2",
        "path.turn_id": turn.turn_id,
        "path.request_id": "create-1",
    }
    found = _schemathesis(
        tmp_path / "api-real-ids",
        f"{base}/v1/openapi.json",
        f"--header={AUTH}",
        "--checks=all",
        "--exclude-checks=positive_data_acceptance",
        *left_out,
        examples=EXAMPLES_ON_REAL_IDS,
        parameters=real,
    )
    assert found["operations"]["tested"] == tested, found["operations"]

    # The pages: HTML, redirects and refusals their generated description does not
    # document, so what is checked is that none is a server error.
    described = tmp_path / "pages.json"
    described.write_text(json.dumps(pages_description))
    headers = [f"--header={h}" for h in _signed_in(base)]
    found = _schemathesis(
        tmp_path / "pages",
        str(described),
        f"--url={base}",
        *headers,
        "--checks=not_a_server_error",
        *left_out,
    )
    assert found["operations"]["tested"] == len(pages - set(NOT_GENERATED)), found["operations"]

"""Installed, enabled, ready and authorised over the API and in the web view, as the
CLI's ``status --json`` shows them (each backend): the project disables the session's
host kind with the real CLI, ``doctor`` records what is ready, and ``/v1/status`` and
the sessions page both say so, naming the session that authorises it."""

from __future__ import annotations

import json

from tests.api.conftest import ADMIN, ApiProject
from tests.api.test_serve_cli import tk
from tests.web.test_page_access import Browser


def test_status_shows_the_extension_states_apart(api_project: ApiProject) -> None:
    project = api_project
    tk(project, "extensions", "disable", "scripted", "--reason", "scripted agents retired")
    tk(project, "doctor", "scripted")

    answer = project.client.get("/v1/status", headers=project.headers())
    assert answer.status_code == 200, answer.text
    rows = {(e["group"], e["name"]): e for e in answer.json()["extensions"]}
    scripted = rows[("host", "scripted")]
    assert scripted["installed"] and scripted["package"] == "turnkeeper"
    assert (scripted["enabled"], scripted["disabled_reason"]) == (False, "scripted agents retired")
    assert scripted["ready"] == "ok" and scripted["checked_at"] is not None
    assert scripted["authorised_by"] == [project.session_id]
    # Installed, never checked here, authorised by nobody, enabled.
    http = rows[("effect", "http")]
    assert (http["installed"], http["enabled"], http["ready"], http["authorised_by"]) == (
        True, True, None, [],
    )  # fmt: skip

    cli = json.loads(tk(project, "status", "--json").stdout)["extensions"]
    assert {(e["group"], e["name"]): e["enabled"] for e in cli} == {
        key: row["enabled"] for key, row in rows.items()
    }

    page = Browser(project, ADMIN).client.get("/")
    assert page.status_code == 200
    assert 'data-extension="host:scripted"' in page.text
    assert "scripted agents retired" in page.text
    assert 'data-extension="effect:http"' not in page.text  # only installed: not listed


def test_status_over_the_api_answers_what_the_cli_prints(api_project: ApiProject) -> None:
    # One listing of goals and sessions, each goal audited from the state listed: the
    # same goals, audits and sessions as ``status --json``, on either backend.
    project = api_project
    project.run_turns(2)
    second = project.new_session("second")

    answer = project.client.get("/v1/status", headers=project.headers())
    assert answer.status_code == 200, answer.text
    api = answer.json()
    cli = json.loads(tk(project, "status", "--json").stdout)
    assert api["goals"] and api["goals"] == cli["goals"]
    assert {s["session_id"] for s in api["sessions"]} == {project.session_id, second}
    by_id = {s["session_id"]: s for s in cli["sessions"]}
    for session in api["sessions"]:
        assert session == by_id[session["session_id"]]
        assert session["counters"]["turns_accepted"] == (
            2 if session["session_id"] == project.session_id else 0
        )

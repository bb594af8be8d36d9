"""Deciding a gate in the browser, and what a read-only share may see of its goal.

An agent's turn asks a question (an ``open_gate`` proposal in its result) that holds
the next todo. The admin, signed in through the login link, finds it on the sessions
page with what asked it (the agent, in which turn of which session), opens it and
approves it in Chromium: the page shows the decision, who took it (the signed-in
identity, ``admin``) and when, ``turnkeeper gate list --json`` records the same, and
the next ``run`` goes on with the todo the gate held.

A read-only share reads its session's goal (the gates too) but is offered no way to
decide; the gate's own page, another goal and a forged decision are refused (403)
with a page that leads back to its session, and the refusal writes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tests.web.conftest import ADMIN, CLI_TIMEOUT, GOAL, Pages, csrf_of, screenshot, write_turn

WAIT_MS = 20_000
QUESTION = "Ship a.txt on Friday?"


def _asking_turn() -> dict[str, Any]:
    """Turn 1 writes a.txt and asks whether to ship it; the question holds todo t2."""
    turn = write_turn("write a", "a.txt")
    turn["result"]["proposals"] = [
        {"kind": "open_gate", "gate_id": "ship", "title": QUESTION, "scope": ["t2"]}
    ]
    return turn


def _run(project: Any, *args: str) -> None:
    """``turnkeeper run`` to its end (its exit code is another test's concern)."""
    project.start_run(*args).wait(timeout=CLI_TIMEOUT)


def _gate(project: Any, gate_id: str) -> dict[str, Any]:
    listed = project.tk_json("gate", "list", GOAL)
    return next(g for g in listed["gates"] if g["id"] == gate_id)


def test_an_agents_question_is_decided_in_the_browser(web_factory: Any, pages: Pages) -> None:
    from playwright.sync_api import expect

    project = web_factory("postgresql", [_asking_turn(), write_turn("write b", "b.txt")])
    sid = project.session_id
    _run(project, "--max-turns", "1")
    assert _gate(project, "ship")["status"] == "open"
    turn = project.tk_json("turn", "list", sid)["turns"][0]["turn_id"]
    with project.serve() as served, pages.open():
        page = pages.new()
        page.goto(f"{served.base}/?token={ADMIN}")
        asked = page.locator('#decisions li[data-gate="ship"]')
        expect(asked).to_contain_text(QUESTION)
        origin = asked.locator(".origin")
        expect(origin).to_have_attribute("data-origin", "agent")
        expect(origin.locator("[data-turn-kind]")).to_have_text("start")
        expect(origin.locator(f'a[href="/sessions/{sid}"]')).to_have_count(1)
        assert turn in (origin.locator("code[title^='turn-']").get_attribute("title") or "")
        screenshot(page, "sessions-decision-waiting")

        asked.locator("a.question").click()
        expect(page).to_have_url(f"{served.base}/gates/ship")
        expect(page.locator("#gate .question")).to_have_text(QUESTION)
        screenshot(page, "gate-open")
        page.click('button[data-choice="approved"]')
        expect(page.locator("#done")).to_have_text("decided: approved", timeout=WAIT_MS)
        resolution = page.locator("#resolution")
        expect(resolution.locator("[data-decision]")).to_have_text("approved")
        expect(resolution.locator("[data-by]")).to_have_text("admin")
        expect(page.locator("form.decide")).to_have_count(0)
        shown_at = resolution.locator("time[data-at]").get_attribute("datetime")
        screenshot(page, "gate-decided")

        # The command line reads back the same decision, by the same identity, at that time.
        gate = _gate(project, "ship")
        assert gate["status"] == "resolved"
        decided = gate["resolution"]
        assert (decided["decision"], decided["by"]) == ("approved", "admin")
        assert decided["payload"] == {"via": "web"}
        assert shown_at and datetime.fromisoformat(shown_at) == datetime.fromisoformat(
            decided["at"]
        )
        page.goto(f"{served.base}/")
        expect(page.locator('#decisions li[data-gate="ship"]')).to_have_count(0)
        page.goto(f"{served.base}/goals/{GOAL}")
        expect(page.locator('#gates tr[data-gate="ship"]')).to_contain_text("approved by admin")

    # The todo the question held is worked once it is decided.
    _run(project)
    todos = {t["id"]: t["status"] for t in project.tk_json("todo", "list", GOAL)["todos"]}
    assert todos["t2"] == "done", todos
    assert (project.root / "b.txt").exists()


def test_a_read_only_share_reads_its_goal_and_cannot_decide(web_factory: Any, pages: Pages) -> None:
    from playwright.sync_api import expect

    project = web_factory("sqlite", [])
    sid = project.session_id
    gate = project.tk("gate", "open", GOAL, "Which database?", "-q").strip()
    project.tk("goal", "add", "another goal", "--id", "other", "-q")
    reader = project.share("read")
    with project.serve() as served, pages.open():
        page = pages.new()
        page.goto(f"{served.base}/?token={reader}")
        assert page.url == f"{served.base}/sessions/{sid}"
        page.click(f'.summary a[href="/sessions/{sid}/goal"]')
        expect(page).to_have_url(f"{served.base}/sessions/{sid}/goal")
        expect(page.locator("h1")).to_contain_text(f"Goal {GOAL}")
        row = page.locator(f'#gates tr[data-gate="{gate}"]')
        expect(row).to_contain_text("Which database?")
        expect(row).to_contain_text("waiting")
        expect(row.locator("a")).to_have_count(0)  # no decide link, no gate page link
        expect(page.locator("form.decide")).to_have_count(0)
        screenshot(page, "goal-read-only-share")

        # Its own goal under the project's path, another goal, the gate's page: refused,
        # each with the way back to the shared session.
        for path in (f"/goals/{GOAL}", "/goals/other", f"/gates/{gate}"):
            pages.expect_refusal(f"{served.base}{path}")
            answer = page.goto(f"{served.base}{path}")
            assert answer is not None and answer.status == 403, path
            expect(page.locator(".error-page")).to_contain_text("one session and its goal")
            expect(page.locator(f'.way-back a[href="/sessions/{sid}"]')).to_have_count(1)
        page.click(f'.way-back a[href="/sessions/{sid}/goal"]')
        expect(page.locator(f'#gates tr[data-gate="{gate}"]')).to_have_count(1)

        # A decision forged with the reader's own web session and CSRF token: refused
        # before anything runs.
        before = project.digest()
        answer = page.request.post(
            f"{served.base}/gates/{gate}/resolve",
            headers={"X-CSRF-Token": csrf_of(page)},
            form={"choice": "approved"},
        )
        assert answer.status == 403 and "share_scope" in answer.text()
        assert "text/html" in answer.headers["content-type"]
        assert project.digest() == before
        assert _gate(project, gate)["status"] == "open"

"""The session controls in the browser: who sees which, and what the server does.

An update share, signed in through its link, crashes a session whose workspace a
crashed turn left damaged and reverts it through the page: the files are restored
on disk, the page marks the revert on the timeline and ``operation show`` agrees.
A read-only share sees no control at all, and a forged request is refused with 403
and writes nothing: one with the reader's own cookie and CSRF token (its mode does
not allow it), one with an update share's cookie but no CSRF token, and a form on
another site that the browser submits itself.
"""

from __future__ import annotations

from typing import Any

from tests.web.conftest import ADMIN, Pages, csrf_of, screenshot, write_turn

WAIT_MS = 20_000
TURNS = [write_turn("write a", "a.txt"), write_turn("write b", "b.txt")]
CONTROLS = ("stop", "resume", "crash", "revert", "delete")


def _damage(root: Any) -> None:
    (root / "README").write_text("overwritten by a crashed turn\n")
    (root / "junk.txt").write_text("half-done work\n")


def test_an_update_share_reverts_a_crashed_session_through_the_page(
    web_factory: Any, pages: Pages
) -> None:
    from playwright.sync_api import expect

    project = web_factory("postgresql", TURNS)
    sid = project.session_id
    project.run_to_end("--max-turns", "1")  # turn 1 completes: its snapshot
    _damage(project.root)
    token = project.share("update")
    with project.serve() as served, pages.open():
        page = pages.new()
        page.goto(f"{served.base}/?token={token}")
        assert page.url == f"{served.base}/sessions/{sid}", page.url  # its one session
        cookie = next(c for c in page.context.cookies() if c["name"] == "tk_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert token not in cookie["value"]
        # An update share may not delete: the control is not there.
        expect(page.locator('[data-action="delete"]')).to_have_count(0)
        expect(page.locator('[data-action="revert"]')).to_have_count(0)  # not crashed yet

        page.click('[data-action="crash"]')  # confirmed in the dialog
        expect(page.locator("#done")).to_have_text(
            "marked crashed: the session is crashed", timeout=WAIT_MS
        )
        expect(page.locator(".summary .headline")).to_contain_text("crashed")
        page.click('[data-action="revert"]')
        expect(page.locator("#done")).to_contain_text(
            "reverted to the last snapshot; the session is suspended", timeout=WAIT_MS
        )
        expect(page.locator(".summary .headline")).to_contain_text("suspended")
        finished = page.locator('li.mark[data-mark="revert-finished"]')
        expect(finished).to_have_count(1)
        expect(finished.locator("strong")).to_have_text("reverted")  # not "revert reverted"
        expect(page.locator('li.mark[data-mark="revert-started"]')).to_have_count(1)
        request_id = finished.locator(".ident code").get_attribute("title")
        assert request_id and request_id.startswith("web-revert-")

        assert (project.root / "README").read_text() == "web test workspace\n"
        assert not (project.root / "junk.txt").exists()
        shown = project.tk_json("operation", "show", request_id)
        assert (shown["kind"], shown["status"], shown["outcome"]) == (
            "revert",
            "finished",
            "reverted",
        )
        assert shown["steps"] == ["restored"]
        screenshot(page, "session-reverted")

        # The admin's pages: every session, and the operations with the revert.
        admin = pages.new()
        admin.goto(f"{served.base}/?token={ADMIN}")
        expect(admin.locator(f'tr[data-session="{sid}"]')).to_contain_text("suspended")
        screenshot(admin, "sessions")
        admin.click('a[data-status="crashed"]')
        expect(admin.locator(f'tr[data-session="{sid}"]')).to_have_count(0)
        admin.goto(f"{served.base}/operations")
        row = admin.locator(f'tr[data-operation="{request_id}"]')
        expect(row).to_contain_text("reverted")
        expect(admin.locator('tr[data-kind="create"]')).to_have_count(1)
        screenshot(admin, "operations")
        admin.goto(f"{served.base}/sessions/{sid}")
        expect(admin.locator('[data-action="delete"]')).to_have_count(1)  # the admin may


def test_a_read_only_share_sees_no_control_and_forged_posts_are_refused(
    web_factory: Any, pages: Pages
) -> None:
    from playwright.sync_api import expect

    project = web_factory("sqlite", TURNS)
    sid = project.session_id
    project.run_to_end("--max-turns", "1")
    reader, updater = project.share("read"), project.share("update")
    with project.serve() as served, pages.open():
        page = pages.new()
        page.goto(f"{served.base}/?token={reader}")
        assert page.url == f"{served.base}/sessions/{sid}"
        expect(page.locator("li.turn")).to_have_count(1)
        expect(page.locator("[data-action]")).to_have_count(0)
        expect(page.locator(".controls")).to_have_count(0)
        for name in CONTROLS:
            expect(page.get_by_role("button", name=name, exact=True)).to_have_count(0)
        screenshot(page, "session-read-only")

        before = project.digest()
        status = project.tk_json("session", "show", sid)["status"]
        # The reader's own web session and CSRF token: its mode does not allow it.
        answer = page.request.post(
            f"{served.base}/sessions/{sid}/crash", headers={"X-CSRF-Token": csrf_of(page)}
        )
        assert answer.status == 403 and "share_mode" in answer.text()
        # An update share's web session, without the CSRF token.
        other = pages.new()
        other.goto(f"{served.base}/?token={updater}")
        answer = other.request.post(f"{served.base}/sessions/{sid}/crash")
        assert answer.status == 403 and "csrf" in answer.text()
        # A form on another site, submitted by the browser holding that web session (a
        # page of the attacker's: its console is not this application's).
        evil = other.context.new_page()
        form = (
            f'<form id="f" method="post" action="{served.base}/sessions/{sid}/crash"></form>'
            '<script>document.getElementById("f").submit()</script>'
        )
        other.context.route(
            "http://attacker.test/**",
            lambda route: route.fulfill(status=200, content_type="text/html", body=form),
        )
        with evil.expect_response(lambda r: r.url.endswith("/crash")) as forged:
            evil.goto("http://attacker.test/")
        assert forged.value.status == 403, forged.value.status  # cross-site, before any cookie
        assert project.digest() == before
        assert project.tk_json("session", "show", sid)["status"] == status

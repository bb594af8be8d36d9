"""A control-plane kill and its recovery, watched on a session page left open.

The session's first turn talks, then pauses mid-turn (the scripted host waits for
ever). The test opens the session page in Chromium, starts ``turnkeeper run``, waits
until the page's live log shows the agent talking and the turn in flight, SIGKILLs
the control plane (its own child, by pid) and starts ``turnkeeper run`` again. The
page, never reloaded, then shows the turn lost, the restart's recovery where it
happened on the timeline, the retry that recovers it, the recovery report (the
host probed again, the turn marked lost) and the turns that follow; it agrees with
``turnkeeper turn list``.
"""

from __future__ import annotations

import signal
from typing import Any

from tests.web.conftest import ADMIN, Pages, message_turn, screenshot, write_turn

WAIT_MS = 30_000


def test_a_kill_and_its_recovery_show_on_the_open_page(
    backend: str, web_factory: Any, pages: Pages
) -> None:
    from playwright.sync_api import expect

    turns = [
        message_turn("write a", attempt=1, messages=6, pause=True),
        write_turn("write a", "a.txt"),
        write_turn("write b", "b.txt"),
    ]
    project = web_factory(backend, turns)
    sid = project.session_id
    with project.serve() as served, pages.open():
        page = pages.new()
        page.goto(f"{served.base}/?token={ADMIN}")
        assert page.url == f"{served.base}/", page.url  # the token is gone from the URL
        page.goto(f"{served.base}/sessions/{sid}")
        page.evaluate("window.__leftOpen = 'the same document'")
        expect(page.locator("#log-state")).to_have_text("live", timeout=WAIT_MS)

        run = project.start_run()
        # The live log (SSE) shows the agent talking, the live part the turn in flight.
        expect(page.locator("#log")).to_contain_text("step 3", timeout=WAIT_MS)
        expect(page.locator("#in-flight")).to_contain_text("host_started", timeout=WAIT_MS)
        in_flight = page.locator('li.turn[data-outcome="in_flight"]')
        expect(in_flight).to_have_count(1, timeout=WAIT_MS)
        run.send_signal(signal.SIGKILL)  # the control plane, mid-turn
        assert run.wait(timeout=30) == -signal.SIGKILL

        project.run_to_end()  # recovers the lost turn, then drives the goal to its end
        lost = page.locator('li.turn[data-outcome="lost"]')
        expect(lost).to_have_count(1, timeout=WAIT_MS)
        expect(lost.locator('[data-mark="lost"]')).to_be_visible()
        expect(page.locator('li.mark[data-mark="recovery"]')).to_have_count(1, timeout=WAIT_MS)
        expect(page.locator('li.turn[data-outcome="completed"]')).to_have_count(2, timeout=WAIT_MS)
        retry = page.locator("li.turn", has=page.locator('[data-mark="recovers"]'))
        expect(retry).to_have_count(1)
        report = page.locator("#recovery-report")
        expect(report.locator('[data-action-kind="turn_marked_lost"]')).to_be_visible()
        expect(report).to_contain_text("host processes: pid")  # probed again at restart
        expect(page.locator("#log")).to_contain_text("lost", timeout=WAIT_MS)
        expect(page.locator("#log")).to_contain_text("writing b.txt", timeout=WAIT_MS)
        expect(page.locator('[data-counter="turns_lost"]')).to_have_text("1 lost")
        assert page.evaluate("window.__leftOpen") == "the same document"  # never reloaded

        # The timeline in the order of the log: the lost turn, the recovery, the retry.
        entries = page.locator("#timeline > li")
        kinds = [
            entries.nth(i).get_attribute("data-outcome")
            or entries.nth(i).get_attribute("data-mark")
            for i in range(entries.count())
        ]
        assert kinds == ["recovery-none", "lost", "recovery", "completed", "completed"], kinds
        listed = project.tk_json("turn", "list", sid)
        rows = listed["turns"] if isinstance(listed, dict) else listed
        shown = [
            page.locator("li.turn").nth(i).get_attribute("data-turn")
            for i in range(page.locator("li.turn").count())
        ]
        assert shown == [t["turn_id"] for t in rows]
        assert [t["outcome"] for t in rows] == ["lost", "completed", "completed"]
        lost_id = rows[0]["turn_id"]
        assert retry.get_attribute("data-turn") == rows[1]["turn_id"]
        assert lost_id[:10] in (retry.locator('[data-mark="recovers"]').text_content() or "")
        screenshot(page, f"session-recovered-{backend}")

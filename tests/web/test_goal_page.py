"""The goal page against the command line: its terminal audit counters and named
blockers are ``turnkeeper audit GOAL --json``'s, before and after the goal changes
under the open page.

The goal has a criterion not yet met, a todo done by a real turn and one still
open, a required monitor that was never read back, and a blocking gate. The page
shows each counter and each blocker; a readback recorded with the command line
while the page is open shows up on it by itself, and the two agree again.
"""

from __future__ import annotations

from typing import Any

from tests.web.conftest import ADMIN, GOAL, Pages, screenshot, write_turn

WAIT_MS = 20_000


def _page_audit(page: Any) -> tuple[dict[str, int], list[tuple[str, str]], str]:
    counters = {
        str(c.get_attribute("data-counter")): int(c.locator(".value").inner_text())
        for c in page.locator("#audit .counter").all()
    }
    blockers = [
        (str(b.get_attribute("data-blocker")), b.locator("code").inner_text())
        for b in page.locator("#audit [data-blocker]").all()
    ]
    terminal = str(page.locator("#audit [data-terminal]").get_attribute("data-terminal"))
    return counters, blockers, terminal


def _cli_audit(project: Any) -> tuple[dict[str, int], list[tuple[str, str]], str]:
    found = project.tk_json("audit", GOAL)
    blockers = [(b["kind"], b["subject"]) for b in found["audit"]["blockers"]]
    return found["counters"], blockers, "true" if found["audit"]["terminal"] else "false"


def test_the_goal_page_audit_is_the_command_lines(web_factory: Any, pages: Pages) -> None:
    from playwright.sync_api import expect

    project = web_factory("sqlite", [write_turn("write a", "a.txt")], criteria=("a exists",))
    project.run_to_end("--max-turns", "1")
    monitor = project.tk(
        "monitor", "add", GOAL, "ci of main", "--cadence", "3600", "--required",
        "--freshness", "600", "-q",
    ).strip()  # fmt: skip
    project.tk("gate", "open", GOAL, "ship it?", "-q")
    with project.serve() as served, pages.open():
        page = pages.new()
        page.goto(f"{served.base}/?token={ADMIN}")
        page.goto(f"{served.base}/goals/{GOAL}")
        counters, blockers, terminal = _page_audit(page)
        assert (counters, blockers, terminal) == _cli_audit(project)
        assert terminal == "false" and len(blockers) >= 4
        assert {kind for kind, _ in blockers} >= {
            "open_todo",
            "stale_readback",
            "unresolved_blocking_gate",
            "acceptance_gap",
        }
        expect(page.locator('tr[data-todo="t1"]')).to_contain_text("done")
        expect(page.locator('tr[data-todo="t2"]')).to_contain_text("t1 (done)")
        expect(page.locator(f'tr[data-monitor="{monitor}"]')).to_contain_text("stale")
        screenshot(page, "goal")

        # The goal changes under the open page: it follows, and still agrees.
        stale_before = counters["stale_readbacks"]
        project.tk("monitor", "readback", monitor, "--value", '{"ci": "green"}')
        expect(page.locator('#audit [data-counter="stale_readbacks"] .value')).to_have_text(
            str(stale_before - 1), timeout=WAIT_MS
        )
        expect(page.locator(f'tr[data-monitor="{monitor}"]')).to_contain_text("fresh")
        assert _page_audit(page) == _cli_audit(project)

"""Why a session is in its status and what its agent last said, read on a phone.

Turn 1 completes; turn 2 talks, then waits. The operator stops the session (the
turn is abandoned), marks it crashed and reverts it, with the command line, and
reads the pages at a phone's width (375 px): the status reason is text on the
sessions page and the session page, whole and inside the screen (not a tooltip, not
cut off), and it is the same words ``session show --json`` gives. No text repeats
itself: the abandoned turn was "stopped by operator" once, the revert on the
timeline is "reverted", and the reverted session is suspended because it was
reverted, not "marked crashed by operator". The sessions page shows what the agent
said last in its latest turn.
"""

from __future__ import annotations

import time
from typing import Any

from tests.web.conftest import ADMIN, CLI_TIMEOUT, Pages, message_turn, screenshot, write_turn

PHONE = 375
MESSAGES = 4

# Whether an element is on the screen whole: inside the viewport and inside every
# ancestor that could cut it off (overflow other than visible), and not cut itself.
WHOLE = """
(element) => {
  const box = element.getBoundingClientRect();
  if (box.width === 0 || box.left < 0 || box.right > window.innerWidth + 0.5) return false;
  if (element.scrollWidth > element.clientWidth + 1) return false;
  for (let up = element.parentElement; up; up = up.parentElement) {
    const style = getComputedStyle(up);
    if (style.overflowX === "visible" && style.overflowY === "visible") continue;
    const frame = up.getBoundingClientRect();
    if (box.left < frame.left - 0.5 || box.right > frame.right + 0.5) return false;
  }
  return true;
}
"""


def _readable(locator: Any, text: str) -> None:
    from playwright.sync_api import expect

    expect(locator).to_be_visible()
    expect(locator).to_have_text(text)
    assert locator.evaluate(WHOLE), f"{text!r} is cut off at {PHONE} px"


def _wait_for_talk(project: Any, sid: str) -> None:
    """Until turn 2 is in flight and its messages are journaled."""
    deadline = time.monotonic() + CLI_TIMEOUT
    while True:
        state = project.tk_json("session", "show", sid)
        turn = state.get("in_flight")
        if turn and turn["envelope"]["todo_id"] == "t2":
            shown = project.tk_json("turn", "show", turn["envelope"]["turn_id"])
            said = [e for e in shown["events"] if e["kind"] == "message"]
            if len(said) >= MESSAGES:
                return
        assert time.monotonic() < deadline, state
        time.sleep(0.3)


def test_reasons_and_what_the_agent_said_read_on_a_phone(web_factory: Any, pages: Pages) -> None:
    from playwright.sync_api import expect

    turns = [
        write_turn("write a", "a.txt"),
        message_turn("write b", attempt=1, messages=MESSAGES, pause=True),
    ]
    project = web_factory("sqlite", turns)
    sid = project.session_id
    run = project.start_run()
    _wait_for_talk(project, sid)
    project.tk("session", "stop", sid)
    run.wait(timeout=CLI_TIMEOUT)
    listed = project.tk_json("turn", "list", sid)["turns"]
    first, stopped = listed[0]["turn_id"], listed[1]["turn_id"]
    assert (listed[1]["outcome"], listed[1]["reason"]) == ("abandoned", "stopped by operator")
    project.tk("session", "crash", sid)

    with project.serve() as served, pages.open():
        page = pages.new(PHONE)
        page.goto(f"{served.base}/?token={ADMIN}")
        row = page.locator(f'tr[data-session="{sid}"]')
        _readable(row.locator(".reason"), "marked crashed by operator")
        # What the agent said last in its latest turn (the stopped one), as text.
        _readable(row.locator(".said q"), f"step {MESSAGES - 1}")

        project.tk("session", "revert", sid, "--request-id", "web-reasons-revert")
        reason = project.tk_json("session", "show", sid)["status_reason"]
        assert reason == f"reverted to the snapshot of turn {first}", reason
        page.reload()
        expect(row.locator('td[data-label="status"] .badge')).to_have_text("suspended")
        _readable(row.locator(".reason"), reason)
        screenshot(page, "sessions-reasons")

        page.set_viewport_size({"width": PHONE, "height": 900})
        page.goto(f"{served.base}/sessions/{sid}")
        headline = page.locator(".summary .headline")
        expect(headline.locator(".badge")).to_have_text("suspended")
        _readable(headline.locator(".reason"), reason)
        _readable(page.locator("#said q"), f"step {MESSAGES - 1}")
        abandoned = page.locator(f'li.turn[data-turn="{stopped}"] .reason')
        expect(abandoned).to_have_text("stopped by operator")
        expect(page.locator('li.mark[data-mark="revert-finished"] strong')).to_have_text("reverted")
        screenshot(page, "session-reasons")

"""A session whose controller died says so, everywhere a user looks.

A real ``turnkeeper run`` drives a slow agent and is SIGKILLed mid-turn. Its lease
stays in the log until it expires (nothing is left to release it), and the session's
status stays ``running`` — but ``session show``, ``session list``, ``status`` (text
and ``--json``), the API and the web view's session page all say that the
controller is gone (its pid) and when its lease expires. Before, every one of them
showed ``running`` with the dead pid's lease and nothing else.
"""

from __future__ import annotations

import json
import os
import re
import signal
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.usage.project import UserProject, kill_processes_with, processes_with, wait_for

RESULT = json.dumps({"kind": "result", "data": {"summary": "done", "todo_done": True}})
ADMIN = "tka_controller-gone-test-0123456789"
WIDE = {"COLUMNS": "250"}  # the tables' words are not folded mid-phrase


@pytest.fixture
def token() -> Iterator[str]:
    """A unique sleep length: finds this test's agent processes and nothing else."""
    value = f"{3000 + uuid.uuid4().int % 5000}.{os.getpid() % 1000}"
    yield value
    kill_processes_with(f"sleep {value}")


def _controller(session: dict[str, Any]) -> dict[str, Any]:
    found = session["controller"]
    assert isinstance(found, dict), session
    return found


def test_a_killed_controller_is_shown_gone_with_its_lease_expiry(
    user_project: UserProject, token: str
) -> None:
    agent = user_project.agent("slow", f"#!/bin/sh\nsleep {token}\necho '{RESULT}'\n")
    user_project.tk("goal", "add", "goal g", "--id", "g")
    user_project.tk("todo", "add", "g", "do it", "--id", "t1")
    config = {"command": [str(agent)], "event_format": "jsonl"}
    created = user_project.tk_json(
        "session", "create", "g", "--host", "subprocess",
        "--host-config", user_project.host_config("host", config), "--workspace", ".",
    )  # fmt: skip
    sid = str(created["session_id"])

    run = user_project.start("run", "--json", "--lease", "120")
    wait_for(lambda: processes_with(f"sleep {token}"), 30, "the agent to start")
    alive = _controller(user_project.tk_json("session", "show", sid))
    assert (alive["alive"], alive["pid"]) == (True, run.pid), alive

    run.signal(signal.SIGKILL)
    assert run.wait(30) == -signal.SIGKILL

    shown = user_project.tk_json("session", "show", sid)
    assert shown["status"] == "running"  # the log cannot know: the lease has not expired
    gone = _controller(shown)
    expires = shown["lease"]["expires_at"]
    assert gone == {
        "owner": shown["lease"]["owner"],
        "alive": False,
        "pid": run.pid,
        "lease_expires_at": expires,
    }, gone
    (listed,) = user_project.tk_json("session", "list")
    assert _controller(listed) == gone
    (in_status,) = user_project.tk_json("status")["sessions"]
    assert _controller(in_status) == gone

    said = f"controller gone (pid {run.pid}); lease expires at"
    text = user_project.tk("session", "show", sid, env=WIDE).stdout
    assert said in text, text
    assert re.search(r"controller gone \(pid \d+\); lease expires at \S+", text), text
    assert said in user_project.tk("session", "list", env=WIDE).stdout
    assert said in user_project.tk("status", env=WIDE).stdout

    # The API and the web view: a real `turnkeeper serve` on this project.
    token_file = user_project.root.parent / "admin-token"
    token_file.write_text(ADMIN + "\n")
    serve = user_project.start("serve", "--port", "0", "--token-file", str(token_file))
    wait_for(lambda: " on http://" in serve.stdout(), 30, "serve to listen")
    base = serve.stdout().split(" on ", 1)[1].split()[0]
    try:
        api = httpx.get(
            f"{base}/v1/sessions/{sid}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30
        )
        assert api.status_code == 200, api.text
        assert api.json()["controller"] == gone
        status = httpx.get(
            f"{base}/v1/status", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30
        )
        assert status.json()["sessions"][0]["controller"] == gone
        with httpx.Client(base_url=base, timeout=30) as browser:
            signed_in = browser.get(f"/?token={ADMIN}", follow_redirects=True)
            assert signed_in.status_code == 200, signed_in.text
            # The dashboard's list says it too, not only the session's own page.
            row = signed_in.text.split(f'data-session="{sid}"', 1)[1].split("</tr>", 1)[0]
            assert f"gone</span> (pid {run.pid})" in row, row
            page = browser.get(f"/sessions/{sid}")
            assert page.status_code == 200
            assert said in page.text, page.text
    finally:
        serve.signal(signal.SIGTERM)
        serve.wait(30)

"""An agent opens a gate; the webhook receiver gets one signed notification — through
a receiver that fails twice first and a ``run`` SIGKILLed while its POST is in flight.

Everything as a user does it: the real ``turnkeeper`` command in a git project
(SQLite), a shell agent on the subprocess host, and an HTTP receiver on 127.0.0.1.
"""

from __future__ import annotations

import json
import signal
import subprocess

from tests.notify.receiver import HOLD, receiving
from tests.usage.project import GIT_IDENTITY, UserProject, wait_for

# One turn: ask a person whether the todo may ship (a blocking gate on it).
GATE = {"kind": "open_gate", "gate_id": "ship", "title": "May it ship?", "scope": ["t-ship"]}
RESULT = json.dumps({"kind": "result", "data": {"proposals": [GATE]}})
AGENT = f"""#!/bin/sh
set -eu
printf '%s\\n' '{RESULT}'
"""
SECRET = "a-secret-of-the-users-0123456789"


def test_a_gate_is_notified_once_signed_through_failures_and_a_sigkill(
    user_project: UserProject,
) -> None:
    project = user_project
    goal = project.tk("goal", "add", "Ship it", "-c", "it shipped", "-q").stdout.strip()
    project.tk("todo", "add", goal, "Ship", "--id", "t-ship", "-q")
    workspace = project.root.parent / "ws"
    workspace.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "start"]):
        subprocess.run(["git", *args], cwd=workspace, env=GIT_IDENTITY, check=True, timeout=60)
    spec = {"command": [str(project.agent("agent.sh", AGENT))], "event_format": "jsonl"}
    project.tk_json(
        "session", "create", goal, "--host", "subprocess",
        "--host-config", project.host_config("agent", spec), "--workspace", str(workspace),
    )  # fmt: skip
    secret_file = project.root.parent / "hook.secret"
    secret_file.write_text(SECRET + "\n")

    # Fails twice, then holds the third POST until the test has killed the run.
    with receiving([500, 500, HOLD]) as receiver:
        added = project.tk_json(
            "notify", "add", receiver.url, "--events", "gate_opened",
            "--secret-file", str(secret_file),
        )  # fmt: skip
        assert added["secret"] is None  # the user's own: not printed back
        listed = project.tk("notify", "list", "--json")
        assert SECRET not in listed.stdout + listed.stderr
        assert [e["endpoint_id"] for e in listed.json()] == [added["endpoint_id"]]

        run = project.start("run", "--json")
        wait_for(receiver.held.is_set, 60, "the third attempt")
        # While it fails, status says so: the endpoint, the failures, the error, the retry.
        status = project.tk_json("status")["notifications"]
        assert run.proc.poll() is None, run.output()  # still delivering, not done
        run.kill()  # SIGKILL, the third POST in flight and unanswered
        (failing,) = status["failing"]
        assert failing["endpoint_id"] == added["endpoint_id"], status
        assert failing["failures"] == 2 and "500" in failing["last_error"], status
        assert failing["next_attempt_at"], status
        # The failures are on record: status says so with the run gone too.
        text = project.tk("status").stdout
        assert f"notify endpoint {added['endpoint_id']}" in text and "failing" in text, text
        gates = project.tk_json("goal", "show", goal)["state"]["gates"]
        assert gates["ship"]["status"] == "open", gates
        receiver.release()

        again = project.start("run", "--json")
        again.wait(timeout=90)
        wait_for(receiver.accepted, 10, "a delivery")

    (taken,) = receiver.accepted()  # one accepted delivery
    keys = {r.key for r in receiver.received}
    assert keys == {taken.key}, [r.headers for r in receiver.received]
    # Retried: two refused, one lost with the run, one taken, all of one notification.
    assert [r.answered for r in receiver.received] == [500, 500, None, 200]
    assert [r.headers["X-Turnkeeper-Attempt"] for r in receiver.received] == ["1", "2", "3", "3"]
    assert all(r.signed_with(SECRET) for r in receiver.received)
    assert not taken.signed_with(SECRET + "x")
    body = taken.json()
    assert (body["event"], body["goal_id"], body["details"]["gate_id"]) == (
        "gate_opened",
        goal,
        "ship",
    )
    assert body["id"] == taken.key

    (endpoint,) = project.tk_json("notify", "list")
    assert (endpoint["delivered"], endpoint["failing"], endpoint["gave_up"]) == (1, None, 0)
    assert project.tk_json("status")["notifications"]["failing"] == []
    project.tk("verify")  # the notifications stream folds like every other
    for secret_seen in (json.dumps(endpoint), again.output(), run.output()):
        assert SECRET not in secret_seen
    assert "Traceback" not in again.output() + run.output(), again.output()


def test_endpoints_are_refused_tested_served_and_removed(user_project: UserProject) -> None:
    project = user_project
    goal = project.tk("goal", "add", "Close me", "-q").stdout.strip()
    refused = {
        ("ftp://example.com/x",): "bad_endpoint_url",
        ("http://127.0.0.1:9/x", "--events", "gate_opened,lunch"): "unknown_notify_event",
    }
    for args, reason in refused.items():
        done = project.tk("notify", "add", *args, expect=3)
        assert reason in done.stderr + done.stdout, done
    weak = project.root.parent / "weak.secret"
    weak.write_text("short\n")
    done = project.tk("notify", "add", "http://127.0.0.1:9/x", "--secret-file", str(weak), expect=3)
    assert "weak_notify_secret" in done.stderr + done.stdout, done
    assert project.tk_json("notify", "list") == []

    with receiving([503]) as receiver:
        added = project.tk_json("notify", "add", receiver.url + "?token=hidden")
        secret = added["secret"]  # generated, printed this once
        assert isinstance(secret, str) and len(secret) >= 32
        listed = project.tk("notify", "list")
        assert secret not in listed.stdout and "hidden" not in listed.stdout, listed.stdout
        # `notify test`: a refused test is UNAVAILABLE, a taken one says so; both signed.
        failed = project.tk("notify", "test", added["endpoint_id"], expect=9)
        assert "notify_test_failed" in failed.stderr + failed.stdout, failed
        project.tk("notify", "test", added["endpoint_id"])
        assert [r.json()["event"] for r in receiver.received] == ["test", "test"]
        assert all(r.signed_with(secret) for r in receiver.received)

        # `serve` delivers too: a goal closed while it runs reaches the receiver.
        serve = project.start("serve", "--port", "0")
        try:
            wait_for(lambda: "serving " in serve.stdout(), 30, "serve to listen")
            project.tk("goal", "close", goal, "--reason", "no_action_needed", "--summary", "ok")
            wait_for(lambda: len(receiver.accepted()) == 2, 20, "the goal_closed notification")
        finally:
            serve.signal(signal.SIGTERM)
            serve.wait(timeout=30)
        closed = receiver.accepted()[-1].json()
        assert (closed["event"], closed["goal_id"]) == ("goal_closed", goal), closed
        assert secret not in serve.output()

    project.tk("notify", "remove", added["endpoint_id"][:5])
    assert project.tk_json("notify", "list") == []
    project.tk("notify", "remove", added["endpoint_id"], expect=4)

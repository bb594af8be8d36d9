"""The Quick tour, whole, as a user runs it: ``turnkeeper init`` in their own git
repository, then every step through the real command, ids captured with ``-q`` and
``--json`` only, ending in a closed goal whose audit is terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.usage.project import COMMAND_TIMEOUT, UserProject

COUNTERS = [
    "open_todos",
    "due_monitors",
    "unresolved_blocking_gates",
    "pending_successors",
    "replan_obligations",
    "unraised_replan_triggers",
    "acceptance_gaps",
    "retryable_postconditions",
    "stale_readbacks",
]

# The tour as a shell script: what a user types (bash -euo pipefail: any step that
# fails, including a failed evidence command, stops it).
TOUR = """
turnkeeper init
GOAL=$(turnkeeper goal add "Ship the parser" -c "all parser tests pass" -q)
TODO=$(turnkeeper todo add "$GOAL" "Write the tokenizer" --requires-evidence tests -q)
EPOCH=$(turnkeeper todo claim "$TODO" -q)
EV=$(turnkeeper evidence record "$GOAL" --key tests -q -- sh -c 'exit 0')
turnkeeper todo done "$TODO" --epoch "$EPOCH" --evidence "$EV"
turnkeeper goal criterion-met "$GOAL" c1 --evidence "$EV"
turnkeeper goal no-follow-up "$GOAL" --summary "the tokenizer was all it took"
turnkeeper audit "$GOAL"
turnkeeper goal close "$GOAL" --summary "parser shipped"
turnkeeper status --json
turnkeeper verify && turnkeeper repair
echo "$GOAL"
"""


def _quiet(project: UserProject, *args: str) -> str:
    out = project.tk(*args).stdout.splitlines()
    assert len(out) == 1, out
    return out[0]


def test_the_quick_tour_step_by_step(user_project: UserProject) -> None:
    p = user_project
    goal = _quiet(p, "goal", "add", "Ship the parser", "-c", "all parser tests pass", "-q")
    todo = p.tk_json("todo", "add", goal, "Write the tokenizer", "--requires-evidence", "tests")[
        "id"
    ]
    epoch = _quiet(p, "todo", "claim", todo, "-q")
    assert epoch == "1"
    shown = p.tk_json("todo", "show", todo)
    assert shown["claim"]["epoch"] == 1 and shown["claim"]["live"] is True

    # A failing check is recorded, and says so with its exit status.
    failed = p.tk(
        "evidence", "record", goal, "--key", "tests", "-q", "--", "sh", "-c", "exit 3", expect=1
    )
    assert failed.stdout.strip().startswith("ev-")
    assert "the command exited 3" in failed.stderr
    ev = _quiet(p, "evidence", "record", goal, "--key", "tests", "-q", "--", "true")
    listed = p.tk_json("evidence", "list", goal)["evidence"]
    assert [(r["evidence"]["exit_code"], r["latest"], r["fresh"]) for r in listed] == [
        (3, False, True),
        (0, True, True),
    ]
    assert listed[1]["evidence"]["revision"] == p.git("rev-parse", "HEAD").strip()

    p.tk("todo", "done", todo, "--epoch", epoch, "--evidence", ev)
    assert p.tk_json("todo", "list", goal, "--status", "done")["todos"][0]["id"] == todo

    # Every todo finished, the criterion still unmet: this is where the tour used to stop.
    audit = p.tk_json("audit", goal)
    assert audit["counters"]["acceptance_gaps"] == 1
    assert audit["counters"]["replan_obligations"] == 1
    refused = p.tk_json("goal", "close", goal, "--summary", "too early", expect=6)
    assert refused["error"]["reason"] == "goal_not_terminal"

    criteria = p.tk("goal", "show", goal).stdout
    assert "c1" in criteria and "unmet" in criteria and "frontier_exhausted" in criteria
    met = p.tk_json("goal", "criterion-met", goal, "c1", "--evidence", ev)
    assert met["id"] == "c1" and met["criterion"]["met"] is True
    settled = p.tk_json("goal", "no-follow-up", goal, "--summary", "the tokenizer was all it took")
    assert settled["discharged"] == ["obl-1"]

    audit = p.tk_json("audit", goal)
    assert sorted(audit["counters"]) == sorted(COUNTERS)
    assert audit["audit"]["terminal"] is True and set(audit["counters"].values()) == {0}
    closed = p.tk_json("goal", "close", goal[:9], "--summary", "parser shipped")
    assert closed["id"] == goal and closed["goal"]["status"] == "closed"
    after = p.tk_json("audit", goal)
    assert after["audit"]["terminal"] is True
    status = p.tk_json("status")
    assert [g["status"] for g in status["goals"]] == ["closed"]
    p.tk("verify")
    # Nothing of turnkeeper's reached the user's repository but the ignore line init added.
    assert p.git("status", "--porcelain") == " M .gitignore\n"


def test_the_quick_tour_as_a_shell_script(user_project: UserProject, tmp_path: Path) -> None:
    script = tmp_path / "tour.sh"
    script.write_text(TOUR)
    env = user_project.env()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", str(script)],
        cwd=user_project.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT * 3,
        check=False,
    )
    assert done.returncode == 0, f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    assert "Traceback" not in done.stderr
    goal = done.stdout.strip().splitlines()[-1]
    assert "Terminal audit: terminal" in done.stdout
    assert user_project.tk_json("goal", "show", goal)["state"]["goal"]["status"] == "closed"

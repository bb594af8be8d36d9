"""Several ``turnkeeper run --worker`` processes sharing one project's sessions.

On the embedded store as a user has it (``turnkeeper init`` in a git repository): the
workers share the SQLite file. Each session works in a git repository of its own; the
agent is a shell script a user would write. What must hold: the workers split the
sessions, every goal closes, every todo's page was written by exactly one turn, and a
session of another site is left to that site's worker.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.usage.project import GIT_IDENTITY, Background, UserProject, wait_for

AGENT = """#!/bin/sh
# One turn: write the todo's page, count the turn in a ledger outside the workspace,
# meet the goal's criterion once both pages exist.
set -eu
page="$TURNKEEPER_TODO_ID.md"
echo "# $TURNKEEPER_TODO_ID" > "$page"
echo "$TURNKEEPER_TURN_ID $TURNKEEPER_TODO_ID" >> "$LEDGER"
sleep "${TURN_SECONDS:-0}"
printf '{"kind": "message", "data": {"text": "wrote %s"}}\\n' "$page"
evidence="{\\"key\\": \\"written\\", \\"command\\": \\"test -s $page\\"}"
proposals=""
if [ "$(ls *.md | wc -l)" -ge 2 ]; then
  evidence="$evidence, {\\"key\\": \\"pages\\", \\"command\\": \\"test 2 -le $(ls *.md | wc -l)\\"}"
  met="\\"criterion_id\\": \\"c1\\", \\"evidence_ids\\": [\\"ev-$TURNKEEPER_TURN_ID-1\\"]"
  proposals="{\\"kind\\": \\"satisfy_criterion\\", $met}"
fi
printf '{"kind": "result", "data": {"todo_done": true, "evidence": [%s], "proposals": [%s]}}\\n' \\
  "$evidence" "$proposals"
"""

# The agent reads LEDGER and TURN_SECONDS from the environment `run` starts in.
AGENT_CONFIG = {"event_format": "jsonl", "pass_env": ["LEDGER", "TURN_SECONDS"]}


def _workspace(root: Path) -> Path:
    root.mkdir(parents=True)
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "start"]):
        subprocess.run(["git", *args], cwd=root, env=GIT_IDENTITY, check=True, timeout=60)
    return root


def _session(project: UserProject, n: int, config: str, *site: str) -> tuple[str, str]:
    goal = project.tk("goal", "add", f"Pages {n}", "-c", "two pages", "-q").stdout.strip()
    for title in ("one", "two"):
        project.tk("todo", "add", goal, title, "--requires-evidence", "written", "-q")
    workspace = _workspace(project.root.parent / f"ws{n}")
    created = project.tk_json(
        "session", "create", goal, "--host", "subprocess", "--host-config", config,
        "--workspace", str(workspace), *site,
    )  # fmt: skip
    return goal, str(created["session_id"])


def test_two_workers_share_the_sessions_and_each_page_is_written_once(
    user_project: UserProject,
) -> None:
    agent = user_project.agent("agent.sh", AGENT)
    config = user_project.host_config("agent", AGENT_CONFIG | {"command": [str(agent)]})
    ledger = user_project.root.parent / "ledger.txt"
    made = [_session(user_project, n, config) for n in range(6)]
    env = {"LEDGER": str(ledger), "TURN_SECONDS": "2"}
    worker = ("run", "--worker", "--max-sessions", "3", "--idle-exit", "3", "--poll", "0.3")
    first = user_project.start(*worker, "--json", env=env)
    # The first holds as many as it may (its turns take seconds) before the second
    # starts, so the second finds the rest however slowly it starts up.
    wait_for(lambda: _claimed(first) >= 3, 120, "the first worker to hold three sessions")
    second = user_project.start(*worker, "--json", env=env)
    assert first.wait(timeout=240) == 0, first.output()
    assert second.wait(timeout=240) == 0, second.output()
    turns = [first.summary()["turns"], second.summary()["turns"]]
    # Each holds three sessions at most, so both drove some; together, one turn a todo.
    assert min(turns) >= 2 and sum(turns) == 12, (turns, first.output(), second.output())
    for goal, _ in made:
        assert user_project.tk_json("goal", "show", goal)["state"]["goal"]["status"] == "closed"
    # Twelve todos, twelve turns, each todo's page written by one turn only.
    entries = ledger.read_text().split()
    todos = entries[1::2]
    assert len(todos) == 12 and len(set(todos)) == 12, entries
    assert user_project.tk("verify").returncode == 0


def test_a_session_of_another_site_waits_for_a_worker_of_that_site(
    user_project: UserProject,
) -> None:
    agent = user_project.agent("agent.sh", AGENT)
    config = user_project.host_config("agent", AGENT_CONFIG | {"command": [str(agent)]})
    env = {"LEDGER": str(user_project.root.parent / "ledger.txt")}
    goal, session = _session(user_project, 0, config, "--site", "build-2")
    here = user_project.start("run", "--worker", "--idle-exit", "1.5", "--poll", "0.2", env=env)
    assert here.wait(timeout=120) == 0, here.output()
    assert user_project.tk_json("session", "show", session)["status"] == "ready"
    assert user_project.tk_json("goal", "show", goal)["state"]["goal"]["status"] == "open"
    there = user_project.start(
        "run", "--worker", "--site", "build-2", "--idle-exit", "2", "--poll", "0.2", env=env
    )
    assert there.wait(timeout=120) == 0, there.output()
    assert user_project.tk_json("goal", "show", goal)["state"]["goal"]["status"] == "closed"


def _claimed(worker: Background) -> int:
    try:
        lines = worker.json_lines()
    except ValueError:  # a line being written: not complete yet
        return 0
    return sum(1 for r in lines if r.get("event") == "recovered")


def test_a_worker_takes_no_session_list(user_project: UserProject) -> None:
    done = user_project.tk("run", "--worker", "--session", "abc", expect=3)
    assert "--worker" in done.stdout + done.stderr

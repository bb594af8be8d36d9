"""A revert does not keep the files a crashed turn hid behind ignore rules of its own.

As a user meets it: ``turnkeeper init`` in their repository, which ignores ``.env``
and ``*.log``; the user has a private ``.env``, a ``debug.log`` and a test cache
folder that ignores itself (``.pytest_cache/``, as pytest makes it). The agent's
first turn completes (its snapshot is taken); in the second it rewrites
``.gitignore`` to ignore ``secret.txt`` and creates it, and hides a ``vault/``
folder the way a cache does (a ``.gitignore`` of ``*`` inside it), then works on
until the control plane is killed. After ``session crash`` and ``session revert``
the worktree — tracked, and untracked-not-ignored under the snapshot's own rules —
is the snapshot's tree; ``secret.txt`` and the vault are moved aside and named in
the result; the user's ignored files are untouched, byte for byte.
"""

from __future__ import annotations

from pathlib import Path

from tests.usage.project import UserProject, kill_processes_with, wait_for
from tests.usage.test_snapshot_revert import GOAL, SLEEP, _session, snapshot_files, worktree_tree

AGENT = """#!/bin/sh
# Turn 1 writes notes and completes; turn 2 hides files of its own behind ignore
# rules, then works on (sleeps) until it is killed.
state="{state}"
if [ ! -e "$state/first-done" ]; then
  echo "first turn" > notes.txt
  touch "$state/first-done"
  echo '{{"kind":"result","data":{{"todo_done":true}}}}'
  exit 0
fi
sleep 0.2  # an agent thinks before it writes
printf '.env\\n*.log\\n.turnkeeper/\\nsecret.txt\\n' > .gitignore
echo "the agent's secret" > secret.txt
mkdir vault && printf '*\\n' > vault/.gitignore && echo "the agent's key" > vault/key.pem
touch "$state/second-started"
exec sleep {sleep}
"""

# What the user keeps out of git: init's project ignores .env and *.log, and the
# cache folder ignores itself.
USERS = {
    ".env": b"API_TOKEN=secret-of-the-user\n",
    "debug.log": b"the user's own log\n",
    ".pytest_cache/.gitignore": b"# Created by pytest automatically.\n*\n",
    ".pytest_cache/v/cache/lastfailed": b'{"tests/test_a.py::test_a": true}\n',
}


def test_a_revert_moves_aside_what_the_crashed_turn_hid_with_its_own_rules(
    user_project: UserProject,
) -> None:
    project = user_project
    for name, content in USERS.items():
        (project.root / name).parent.mkdir(parents=True, exist_ok=True)
        (project.root / name).write_bytes(content)
    project.tk("goal", "add", "Write the notes", "--id", GOAL)
    project.tk("todo", "add", GOAL, "First notes", "--id", "t1")
    project.tk("todo", "add", GOAL, "More notes", "--id", "t2")
    state = project.root.parent / "agent-state"
    state.mkdir()
    sid = _session(project, AGENT.format(state=state, sleep=SLEEP))

    run = project.start("run", "--json")
    try:
        wait_for((state / "second-started").exists, 60, "the second turn")
    finally:
        run.kill()  # the control plane dies mid-turn
        kill_processes_with(SLEEP)  # and the agent it started with it
    (snap,) = project.tk_json("session", "snapshots", sid)["snapshots"]
    tree = snap["workspace_tree"]
    captured = snapshot_files(project, tree)
    assert set(captured) == {".gitignore", "README.md", "notes.txt"}
    assert "secret.txt" not in project.git("status", "--porcelain")  # hidden, as meant

    project.tk("session", "crash", sid)
    done = project.tk_json("session", "revert", sid, "--request-id", "revert-1")

    assert done["result"] == "reverted", done
    # The snapshot's .gitignore is back, so git sees the worktree under its rules.
    assert (project.root / ".gitignore").read_bytes() == captured[".gitignore"]
    assert worktree_tree(project.root) == tree
    assert not (project.root / "secret.txt").exists()
    assert not (project.root / "vault").exists()
    assert {name: (project.root / name).read_bytes() for name in USERS} == USERS
    preserved = done["preserved"]
    assert sorted(preserved["paths"]) == [
        ".gitignore",
        "secret.txt",
        "vault/.gitignore",
        "vault/key.pem",
    ]
    kept = Path(preserved["directory"]) / "files"
    assert (kept / "secret.txt").read_text() == "the agent's secret\n"
    assert (kept / "vault" / "key.pem").read_text() == "the agent's key\n"
    assert "secret.txt" in (kept / ".gitignore").read_text()  # the agent's rules, kept too
    assert project.tk_json("operation", "show", "revert-1")["preserved"] == preserved

"""Snapshots and revert in a project made by ``turnkeeper init``, as a user meets them.

``init`` adds ``.turnkeeper/`` to the user's ``.gitignore``; the repository also
ignores ``.env`` and ``*.log``, and the user has a private ``.env`` and ``debug.log``.
Completed turns must take snapshots there (before, every snapshot failed on the
ignored ``.turnkeeper/`` and nothing said so). A session whose agent, in a turn that
never completed, rewrote ``.gitignore`` to stop ignoring ``.env`` and added a file
of its own is crashed and reverted: the worktree must be the snapshot's byte for
byte, the user's ``.env`` and ``debug.log`` untouched, and what the revert took
away moved aside and named, not deleted.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from tests.usage.project import GIT_IDENTITY, UserProject, kill_processes_with, wait_for
from tests.usage.refusals import refused

GOAL = "g1"
SLEEP = f"{os.getpid() % 1000 + 300}.{os.getpid()}"  # the agent's sleep: unique to us

AGENT = """#!/bin/sh
# Turn 1 writes notes and completes; turn 2 stops ignoring .env, adds a file of its
# own, changes the notes, and then works on (sleeps) until it is killed.
state="{state}"
if [ ! -e "$state/first-done" ]; then
  echo "first turn" > notes.txt
  mkdir -p src && echo "print('v1')" > src/app.py
  touch "$state/first-done"
  echo '{{"kind":"result","data":{{"todo_done":true}}}}'
  exit 0
fi
printf '*.log\\n.turnkeeper/\\n' > .gitignore
echo "the agent's own" > agent-new.txt
echo "second turn" >> notes.txt
rm src/app.py
touch "$state/second-started"
exec sleep {sleep}
"""


def _session(project: UserProject, script: str) -> str:
    agent = project.agent("agent.sh", script)
    config = project.host_config("agent", {"command": [str(agent)], "event_format": "jsonl"})
    created = project.tk_json(
        "session", "create", GOAL, "--host", "subprocess", "--host-config", config
    )
    return str(created["session_id"])


def worktree_tree(root: Path) -> str:
    """The tree of the worktree as git sees it now (tracked + untracked-not-ignored),
    built with an index of its own so nothing of the user's is touched."""
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, **GIT_IDENTITY, "GIT_INDEX_FILE": f"{scratch}/index"}
        subprocess.run(["git", "add", "-A"], cwd=root, env=env, check=True, timeout=60)
        out = subprocess.run(
            ["git", "write-tree"], cwd=root, env=env, check=True, capture_output=True, text=True
        )
        return out.stdout.strip()


def snapshot_files(project: UserProject, tree: str) -> dict[str, bytes]:
    names = project.git("ls-tree", "-r", "-z", "--name-only", tree).split("\0")
    return {
        name: subprocess.run(
            ["git", "cat-file", "blob", f"{tree}:{name}"],
            cwd=project.root,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
        for name in names
        if name
    }


def test_turns_take_snapshots_and_a_revert_keeps_what_it_never_captured(
    user_project: UserProject,
) -> None:
    project = user_project
    project.tk("goal", "add", "Write the notes", "--id", GOAL)
    project.tk("todo", "add", GOAL, "First notes", "--id", "t1")
    project.tk("todo", "add", GOAL, "More notes", "--id", "t2")
    state = project.root.parent / "agent-state"
    state.mkdir()
    sid = _session(project, AGENT.format(state=state, sleep=SLEEP))
    private = {name: (project.root / name).read_bytes() for name in (".env", "debug.log")}

    run = project.start("run", "--json")
    try:
        wait_for((state / "second-started").exists, 60, "the second turn")
    finally:
        run.kill()  # the control plane dies mid-turn
        kill_processes_with(SLEEP)  # and the agent it started with it

    listed = project.tk_json("session", "snapshots", sid)["snapshots"]
    assert len(listed) == 1, listed
    snap = listed[0]
    assert snap["kept"] == "yes" and snap["snapshot_failed"] is None, snap
    assert snap["workspace_commit"] and snap["workspace_tree"], snap
    refs = project.git("for-each-ref", "--format=%(refname) %(objectname)", "refs/turnkeeper/")
    assert f"{snap['snapshot_ref']} {snap['workspace_commit']}" in refs.splitlines()
    tree = snap["workspace_tree"]
    captured = snapshot_files(project, tree)
    assert set(captured) == {".gitignore", "README.md", "notes.txt", "src/app.py"}
    assert (project.root / "agent-new.txt").exists()  # the interrupted turn's work

    project.tk("session", "crash", sid)
    done = project.tk_json("session", "revert", sid, "--request-id", "revert-1")

    assert done["result"] == "reverted", done
    assert worktree_tree(project.root) == tree  # exactly the snapshot's files
    for name, content in captured.items():
        assert (project.root / name).read_bytes() == content, name
    assert not (project.root / "agent-new.txt").exists()
    # The user's ignored files: the agent's .gitignore no longer ignored .env.
    assert {name: (project.root / name).read_bytes() for name in private} == private
    # What the revert overwrote or removed is kept, and named in its result.
    preserved = done["preserved"]
    assert sorted(preserved["paths"]) == [".gitignore", "agent-new.txt", "notes.txt"]
    kept = Path(preserved["directory"])
    assert kept.is_relative_to(project.root / ".git" / "turnkeeper")
    assert (kept / "files" / "agent-new.txt").read_text() == "the agent's own\n"
    assert (kept / "files" / "notes.txt").read_text() == "first turn\nsecond turn\n"
    shown = project.tk_json("operation", "show", "revert-1")
    assert shown["preserved"] == preserved and shown["steps"] == ["restored"]
    assert "moved aside" in project.tk("operation", "show", "revert-1").stdout


LOCKING_AGENT = """#!/bin/sh
# Turn 1 leaves a lock on the session's snapshot index, as a concurrent git would;
# turn 2 removes it.
lock=".git/turnkeeper/sessions/$TURNKEEPER_SESSION_ID/index.lock"
if [ ! -e "{state}/first-done" ]; then
  echo one > one.txt
  mkdir -p "$(dirname "$lock")" && touch "$lock"
  touch "{state}/first-done"
else
  rm -f "$lock"
  echo two > two.txt
fi
echo '{{"kind":"result","data":{{"todo_done":true}}}}'
"""


def test_a_snapshot_that_fails_says_so_and_the_next_turn_takes_one(
    user_project: UserProject,
) -> None:
    project = user_project
    project.tk("goal", "add", "Write files", "--id", GOAL)
    project.tk("todo", "add", GOAL, "One", "--id", "t1")
    project.tk("todo", "add", GOAL, "Two", "--id", "t2")
    state = project.root.parent / "agent-state"
    state.mkdir()
    sid = _session(project, LOCKING_AGENT.format(state=state))

    project.tk("run", "--max-turns", "1")

    shown = project.tk_json("session", "show", sid)
    failed = shown["last_completed"]["snapshot"]["snapshot_failed"]
    assert failed and "index.lock" in failed, shown["last_completed"]
    assert shown["last_completed"]["snapshot"]["snapshot_ref"] is None
    assert "no snapshot of that turn" in project.tk("session", "show", sid).stdout
    assert "snapshot failed" in project.tk("status").stdout
    status = project.tk_json("status")
    assert status["sessions"][0]["last_completed"]["snapshot"]["snapshot_failed"] == failed
    listed = project.tk_json("session", "snapshots", sid)["snapshots"]
    assert [row["kept"] for row in listed] == ["failed"]

    project.tk("run", "--max-turns", "1")

    listed = project.tk_json("session", "snapshots", sid)["snapshots"]
    assert [row["kept"] for row in listed] == ["failed", "yes"], listed
    assert listed[1]["snapshot_failed"] is None
    files = project.git("ls-tree", "-r", "--name-only", listed[1]["workspace_tree"]).split()
    assert {"one.txt", "two.txt"} <= set(files)


def test_a_submodule_workspace_is_refused_at_create(user_project: UserProject) -> None:
    project = user_project
    library = project.root.parent / "library"
    library.mkdir()
    for args in (("init", "-q", "-b", "main"), ("commit", "-q", "--allow-empty", "-m", "lib")):
        subprocess.run(["git", *args], cwd=library, env=project.env(), check=True, timeout=60)
    project.git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "lib")
    project.tk("goal", "add", "Use the library", "--id", GOAL)

    here = refused(
        project, "session", "create", GOAL, code="FAILED_PRECONDITION",
        reason="workspace_has_submodules",
    )  # fmt: skip
    assert "holds submodules (lib)" in here["message"] and "--no-snapshots" in here["message"]
    inner = refused(
        project, "session", "create", GOAL, "--workspace", "lib",
        code="FAILED_PRECONDITION", reason="workspace_has_submodules",
    )  # fmt: skip
    assert "is a submodule of" in inner["message"]
    created = project.tk_json("session", "create", GOAL, "--no-snapshots")
    assert created["snapshots"] is False


FIRST_TURN_AGENT = """#!/bin/sh
# The first attempt rewrites the notes and works on (sleeps) until it is killed; the
# retry finishes.
if [ ! -e "{state}/first-started" ]; then
  echo "half done" > README.md
  echo "scratch" > scratch.txt
  touch "{state}/first-started"
  exec sleep {sleep}
fi
echo "done" > README.md
echo '{{"kind":"result","data":{{"todo_done":true}}}}'
"""


def test_a_session_crashed_in_its_first_turn_is_not_reverted_and_resumes(
    user_project: UserProject,
) -> None:
    """No turn completed, so no snapshot: the revert is refused with what to do instead,
    touches nothing, and the session resumed retries the turn to its end."""
    project = user_project
    project.tk("goal", "add", "Rewrite the readme", "--id", GOAL)
    project.tk("todo", "add", GOAL, "Rewrite it", "--id", "t1")
    state = project.root.parent / "agent-state"
    state.mkdir()
    sid = _session(project, FIRST_TURN_AGENT.format(state=state, sleep=SLEEP))
    run = project.start("run")
    try:
        wait_for((state / "first-started").exists, 60, "the first turn")
    finally:
        run.kill()  # the control plane dies in the session's first turn
    project.tk("session", "crash", sid)  # ends the agent it left running
    assert project.tk_json("session", "snapshots", sid)["snapshots"] == []
    left = worktree_tree(project.root)

    error = refused(
        project, "session", "revert", sid, "--request-id", "revert-1",
        code="FAILED_PRECONDITION", reason="no_snapshot",
    )  # fmt: skip
    assert "no turn of this session has completed" in error["message"], error
    assert "`session resume`" in error["message"], error
    assert worktree_tree(project.root) == left  # the interrupted turn's files, untouched
    assert (project.root / "scratch.txt").read_text() == "scratch\n"

    project.tk("session", "resume", sid)
    project.tk("run", timeout=90)
    shown = project.tk_json("session", "show", sid)
    assert shown["counters"]["turns_completed"] >= 1, shown["counters"]
    assert (project.root / "README.md").read_text() == "done\n"
    assert [row["kept"] for row in project.tk_json("session", "snapshots", sid)["snapshots"]]

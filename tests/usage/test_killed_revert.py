"""A revert SIGKILLed in the middle of its restore, and the retry that finishes it.

The user's repository runs a slow smudge filter on ``*.txt`` (as a git-lfs or a
decrypting filter can be): the revert's ``git checkout-index`` spends seconds in it.
The revert is SIGKILLed while git is inside the filter. No git process of the revert
may live on (before, its ``checkout-index`` went on writing the worktree for seconds
with nobody left to record it), nothing may be left in the temporary directory, and
the same request retried restores the snapshot once: one ``restored`` step, the
worktree the snapshot's, byte for byte.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.usage.project import UserProject, kill_processes_with, processes_with, wait_for
from tests.usage.test_snapshot_revert import snapshot_files, worktree_tree

GOAL = "g1"
FILES = ("a.txt", "b.txt", "c.txt")
AGENT_SLEEP = f"{os.getpid() % 1000 + 400}.{os.getpid()}"
FILTER_SLEEP = f"2.{os.getpid()}"  # each file: about two seconds in the filter

AGENT = """#!/bin/sh
if [ ! -e "{state}/first-done" ]; then
  for f in {files}; do echo "snapshot's $f" > "$f"; done
  touch "{state}/first-done"
  echo '{{"kind":"result","data":{{"todo_done":true}}}}'
  exit 0
fi
for f in {files}; do echo "changed $f" > "$f"; done
touch "{state}/second-started"
exec sleep {sleep}
"""


def _files_now(root: Path) -> dict[str, bytes | None]:
    return {f: (root / f).read_bytes() if (root / f).exists() else None for f in FILES}


def _git_processes_in(root: Path) -> list[int]:
    """Live git processes working in ``root`` (their current directory)."""
    found = []
    for pid in processes_with("git"):
        try:
            exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            continue
        if exe == "git" and cwd == root:
            found.append(pid)
    return found


def test_a_killed_revert_leaves_no_git_running_and_a_retry_restores_once(
    user_project: UserProject, tmp_path: Path
) -> None:
    project = user_project
    project.git("config", "filter.slow.smudge", f"sleep {FILTER_SLEEP}; cat")
    (project.root / ".git" / "info").mkdir(exist_ok=True)
    (project.root / ".git" / "info" / "attributes").write_text("*.txt filter=slow\n")
    project.tk("goal", "add", "Write three files", "--id", GOAL)
    project.tk("todo", "add", GOAL, "Write them", "--id", "t1")
    project.tk("todo", "add", GOAL, "Change them", "--id", "t2")
    state = tmp_path / "agent-state"
    state.mkdir()
    script = AGENT.format(state=state, files=" ".join(FILES), sleep=AGENT_SLEEP)
    agent = project.agent("agent.sh", script)
    config = project.host_config("agent", {"command": [str(agent)], "event_format": "jsonl"})
    sid = project.tk_json(
        "session", "create", GOAL, "--host", "subprocess", "--host-config", config
    )["session_id"]
    run = project.start("run")
    try:
        wait_for((state / "second-started").exists, 60, "the second turn")
    finally:
        run.kill()
        kill_processes_with(AGENT_SLEEP)
    project.tk("session", "crash", sid)
    tree = project.tk_json("session", "snapshots", sid)["snapshots"][-1]["workspace_tree"]

    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    revert = project.start(
        "session", "revert", sid, "--request-id", "revert-1", env={"TMPDIR": str(scratch)}
    )
    try:
        wait_for(lambda: processes_with(f"sleep {FILTER_SLEEP}"), 60, "git inside the filter")
        assert _git_processes_in(project.root), "the restore's git is not running"
    finally:
        revert.kill()

    wait_for(lambda: not _git_processes_in(project.root), 2, "the revert's git to end with it")
    after_kill = _files_now(project.root)
    time.sleep(float(FILTER_SLEEP) + 0.5)  # what a git left running would write by now
    assert _files_now(project.root) == after_kill, "the worktree changed after the kill"
    assert list(scratch.iterdir()) == []  # nothing of the revert's outside the repository
    leftover = list((project.root / ".git" / "turnkeeper" / "tmp").glob("revert-*"))
    assert leftover, "the killed revert had scratch files in the git directory"

    done = project.tk_json("session", "revert", sid, "--request-id", "revert-1")

    assert done["result"] == "reverted"
    assert done["operation"]["steps"] == ["restored"]
    assert worktree_tree(project.root) == tree
    for name, content in snapshot_files(project, tree).items():
        assert (project.root / name).read_bytes() == content, name
    assert list((project.root / ".git" / "turnkeeper" / "tmp").glob("revert-*")) == []
    # Every file the agent changed is kept, whichever attempt moved it.
    assert sorted(done["preserved"]["paths"]) == sorted(FILES)
    kill_processes_with(f"sleep {FILTER_SLEEP}")  # a filter whose git is gone, if still asleep

"""The demo's world: a throwaway git repository, a goal, and the scripted agent's script.

Three todos. The agent writes real files and turnkeeper re-runs the agent's
checks as evidence. Two turns are set up to be killed for real:

* ``write sub()`` pauses mid-turn so the demo can SIGKILL the *host* (the
  control plane stays up and resumes it with a continuation turn);
* ``write the docs`` starts a detached ``sleep`` the way agent CLIs start shell
  commands, then pauses so the demo can SIGKILL the *control plane*; the
  restarted control plane ends the orphaned agent and its child and continues.
  With the runner (``demo --runner``) the agent belongs to the runner instead: it
  survives the kill, the restarted control plane reattaches, and the same turn goes
  on to write the docs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pydantic's types: ``--help`` need not import pydantic to start
    from turnkeeper.json_types import JsonDict, JsonList

PY = sys.executable
HOST_KILL_POINT = "host-kill"
CONTROL_PLANE_KILL_POINT = "control-plane-kill"

ADD = "def add(a, b):\n    return a + b\n"
SUB = "def sub(a, b):\n    return a - b\n"
DOCS = "# calc\n\n`add(a, b)` and `sub(a, b)`, checked by turnkeeper.\n"


def _check(code: str, key: str) -> JsonDict:
    return {"key": key, "command": f'{PY} -c "{code}"'}


def agent_script(state_dir: Path, *, runner: bool = False) -> JsonDict:
    add_check = _check("from add import add; assert add(2, 3) == 5", "add-works")
    sub_check = _check("from sub import sub; assert sub(5, 3) == 2", "sub-works")
    docs_check = _check(
        "import pathlib; assert 'sub(a, b)' in pathlib.Path('README.md').read_text()",
        "docs-mention-sub",
    )
    return {
        "state_dir": str(state_dir),
        "script": {
            "turns": [
                {
                    "match": {"todo": "write add()"},
                    "steps": [
                        {"op": "message", "text": "adding add()"},
                        {"op": "write", "path": "add.py", "content": ADD},
                    ],
                    "result": {
                        "summary": "add() written",
                        "todo_done": True,
                        "evidence": [add_check],
                    },
                },
                {
                    "match": {"todo": "write sub()", "kind": "continuation"},
                    "steps": [
                        {"op": "message", "text": "reconciling: sub.py was half written"},
                        {"op": "write", "path": "sub.py", "content": SUB},
                    ],
                    "result": {
                        "summary": "sub() finished after the crash",
                        "todo_done": True,
                        "evidence": [sub_check],
                    },
                },
                {
                    "match": {"todo": "write sub()"},
                    "steps": [
                        {"op": "write", "path": "sub.py", "content": "def sub(a, b):\n"},
                        {"op": "checkpoint", "name": HOST_KILL_POINT, "pause": True},
                    ],
                },
                {
                    "match": {"todo": "write the docs", "kind": "continuation"},
                    "steps": [
                        {"op": "message", "text": "reconciling after the control plane restart"},
                        {"op": "write", "path": "README.md", "content": DOCS},
                    ],
                    "result": {
                        "summary": "docs written",
                        "todo_done": True,
                        "evidence": [docs_check],
                    },
                },
                _docs_start_turn(docs_check, runner=runner),
            ]
        },
    }


def _docs_start_turn(docs_check: JsonDict, *, runner: bool) -> JsonDict:
    """The docs turn the control plane is killed in. Without a runner it never ends
    (the restart ends it, a continuation writes the docs); with one, it outlives the
    kill and writes them itself once the demo lets it go on."""
    paused: JsonList = [
        {"op": "shell", "command": "sleep 600", "detach": True},
        {"op": "checkpoint", "name": CONTROL_PLANE_KILL_POINT, "pause": True},
    ]
    if not runner:
        return {"match": {"todo": "write the docs"}, "steps": paused}
    return {
        "match": {"todo": "write the docs"},
        "steps": [
            *paused,
            {"op": "message", "text": "still here after the control plane's SIGKILL"},
            {"op": "write", "path": "README.md", "content": DOCS},
        ],
        "result": {"summary": "docs written", "todo_done": True, "evidence": [docs_check]},
    }


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def make_repository(root: Path) -> Path:
    repo = root / "calc"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "demo@turnkeeper.invalid")
    _git(repo, "config", "user.name", "turnkeeper demo")
    (repo / ".gitignore").write_text(".turnkeeper-pause/\n")
    (repo / "README.md").write_text("# calc\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "initial")
    return repo

"""A host from a package of its own supplies its session artifact, and snapshots and
revert treat it as they treat the built-in agent CLIs' transcripts.

A user's plugin, installed as pip leaves one (a module and its ``*.dist-info``),
declares host kind ``notebook``: a plain command whose agent keeps its session in a
notebook file outside the workspace, and which says where (``session_artifact``).
In a project made by ``turnkeeper init``, with the real CLI: every turn's snapshot
copies the notebook with its digest; after the notebook is changed behind
turnkeeper's back, a crash and ``session revert`` put the snapshot's notebook back.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.extensions.kit import write_plugin
from tests.usage.project import UserProject

PLUGIN = '''
"""Host kind notebook: a plain command whose agent keeps a notebook per session."""
from pathlib import Path

from turnkeeper.hosts.subprocess_host import SubprocessHost


class NotebookHost(SubprocessHost):
    kind = "notebook"

    def session_artifact(self, handle: str, workspace: Path) -> Path | None:
        return workspace.parent / f"{workspace.name}-notebooks" / f"{handle}.md"
'''

AGENT = """#!/bin/sh
# One turn: note it in the session's notebook, write the todo's page.
set -eu
notebooks="$1"; mkdir -p "$notebooks"
echo "worked on $TURNKEEPER_TODO_ID" >> "$notebooks/nb-1.md"
echo "# $TURNKEEPER_TODO_ID" > "$TURNKEEPER_TODO_ID.md"
echo '{"kind": "session.bound", "data": {"handle": "nb-1"}}'
printf '{"kind": "result", "data": {"todo_done": true, "evidence": [%s]}}\\n' \\
  "{\\"key\\": \\"page\\", \\"command\\": \\"test -s $TURNKEEPER_TODO_ID.md\\"}"
"""


def test_a_plugin_hosts_session_artifact_is_snapshotted_and_reverted(
    user_project: UserProject, tmp_path: Path
) -> None:
    plugins = write_plugin(
        tmp_path / "site",
        "notebook-host",
        "1.0",
        {"turnkeeper.hosts": {"notebook": "notebook_host:NotebookHost"}},
        {"notebook_host": PLUGIN},
    )
    env = {"PYTHONPATH": str(plugins)}
    project = user_project
    notebook = project.root.parent / f"{project.root.name}-notebooks" / "nb-1.md"
    agent = project.agent("agent.sh", AGENT)
    config = project.host_config(
        "notebook",
        {"command": [str(agent), str(notebook.parent)], "event_format": "jsonl"},
    )
    goal = project.tk("goal", "add", "Pages", "-c", "pages exist", "-q").stdout.strip()
    for n in (1, 2):
        project.tk("todo", "add", goal, f"Page {n}", "--requires-evidence", "page")
    created = project.tk(
        "session", "create", goal, "--host", "notebook", "--host-config", config, "--json",
        env=env,
    ).json()  # fmt: skip
    sid = str(created["session_id"])

    project.tk("run", "--max-turns", "2", env=env)
    snapshots = project.tk("session", "snapshots", sid, "--json", env=env).json()["snapshots"]
    assert len(snapshots) == 2, snapshots
    last = snapshots[-1]
    assert last["host_artifact_path"] == str(notebook.resolve())
    kept = notebook.read_bytes()
    assert last["host_artifact_digest"] == hashlib.sha256(kept).hexdigest()
    assert Path(last["host_artifact_copy"]).read_bytes() == kept
    assert kept.decode().count("worked on") == 2

    notebook.write_text("scribbled over after the last snapshot\n")
    project.tk("session", "crash", sid, env=env)
    done = project.tk(
        "session", "revert", sid, "--request-id", "revert-nb", "--json", env=env
    ).json()
    assert done["result"] == "reverted", done
    assert notebook.read_bytes() == kept  # the snapshot's notebook is back

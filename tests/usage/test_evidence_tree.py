"""Evidence and snapshots name the content that was tested, not only HEAD.

An agent's work is often uncommitted for many turns: every record then ran on the
same commit. Each evidence record also names the worktree's tree (tracked and
untracked-not-ignored files), which differs as soon as the work does; the session's
snapshots name their own commit and tree. Tried as a user meets it: ``evidence
record`` from the command line, and a scripted agent's turns through ``run``.
"""

from __future__ import annotations

from typing import Any

from tests.usage.project import UserProject

GOAL = "g1"


def _evidence(project: UserProject) -> list[dict[str, Any]]:
    shown = project.tk_json("goal", "show", GOAL)
    records = shown["state"]["evidence"].values()
    return sorted(records, key=lambda e: e["recorded_at"])


def test_evidence_on_uncommitted_work_names_the_worktree_it_ran_on(
    user_project: UserProject,
) -> None:
    project = user_project
    project.tk("goal", "add", "Write the parser", "--id", GOAL)
    head = project.git("rev-parse", "HEAD").strip()
    record = ("evidence", "record", GOAL, "--key", "tests", "--", "true")

    (project.root / "parser.py").write_text("def parse(): ...\n")  # untracked, not committed
    project.tk(*record)
    (project.root / "parser.py").write_text("def parse(text): return text\n")
    project.tk(*record)
    project.tk(*record)  # the same content again: the same tree

    first, second, third = _evidence(project)
    assert first["revision"] == second["revision"] == head  # HEAD alone cannot tell them apart
    assert first["tree"] and second["tree"] and first["tree"] != second["tree"]
    assert third["tree"] == second["tree"]
    # Shown so a person can tell them apart, in the evidence table.
    text = project.tk("goal", "show", GOAL).stdout
    assert first["tree"][:10] in text and second["tree"][:10] in text

    # Once the work is committed, the record's tree is that commit's own tree.
    project.git("add", "-A")
    project.git("commit", "-q", "-m", "parser")
    project.tk(*record)
    committed = _evidence(project)[-1]
    assert committed["revision"] == project.git("rev-parse", "HEAD").strip() != head
    assert committed["tree"] == project.git("rev-parse", "HEAD^{tree}").strip() == second["tree"]


def test_an_agents_evidence_and_snapshots_differ_turn_by_turn(user_project: UserProject) -> None:
    project = user_project
    project.tk("goal", "add", "Write the notes", "--id", GOAL)
    for n in (1, 2):
        project.tk("todo", "add", GOAL, f"Write note {n}", "--id", f"t{n}")
    check = {"key": "notes", "command": "test -s notes.txt"}
    turns = [
        {
            "steps": [{"op": "append", "path": "notes.txt", "content": f"note {n}\n"}],
            "result": {"todo_done": True, "evidence": [check]},
        }
        for n in (1, 2)
    ]
    config = project.host_config(
        "scripted",
        {"state_dir": str(project.root.parent / "host-state"), "script": {"turns": turns}},
    )
    sid = project.tk_json("session", "create", GOAL, "--host-config", config)["session_id"]
    run = project.start("run", "--json")
    assert run.wait() == 0, run.output()

    evidence = _evidence(project)
    assert len(evidence) == 2, evidence
    head = project.git("rev-parse", "HEAD").strip()
    assert [e["revision"] for e in evidence] == [head, head]  # nothing was committed
    assert evidence[0]["tree"] != evidence[1]["tree"]

    snapshots = project.tk_json("session", "snapshots", sid)["snapshots"]
    assert len(snapshots) == 2, snapshots
    # Each turn's snapshot holds the content its evidence ran on.
    assert [s["workspace_tree"] for s in snapshots] == [e["tree"] for e in evidence]
    assert snapshots[0]["workspace_commit"] != snapshots[1]["workspace_commit"]
    shown = project.tk("session", "show", sid).stdout
    assert f"snapshot {snapshots[1]['workspace_commit'][:12]}" in shown

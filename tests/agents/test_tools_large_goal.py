"""A real agent CLI reads a large goal through its tools: the goal's shared snapshot and
the events after it, folded by the tool server.

The goal is past the size under which a channel gets it whole (300 todos held back
behind a blocked one). The first turn's agent adds a todo; the second turn's agent asks
the ``goal`` tool and is shown that todo as its own, which it can only be if the tool
server folded the events written since the snapshot the first turn's channel wrote.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.agents.conftest import MakeKit
from tests.agents.fakes import Rule, Text, Tool
from tests.usage.project import UserProject
from turnkeeper import Project
from turnkeeper.tools.channel import GOAL_EVENTS_FILE, GOAL_FILE, WHOLE_BELOW_BYTES

RUN_TIMEOUT = 240.0
HELD = 300  # todos held back: enough to pass WHOLE_BELOW_BYTES with their titles
TITLE = "Write and test one more part of the parser, " * 6

RULES = [
    Rule(
        "todo t-next: write the next part",
        [
            Tool("goal", {}),
            Tool("todo_done", {"summary": "the next part is written"}),
            Text("The next part is written."),
        ],
    ),
    Rule(
        "todo t-first: write the first part",
        [
            Tool("add_todo", {"title": "write the next part", "todo_id": "t-next"}),
            Tool("todo_done", {"summary": "the first part is written"}),
            Text("The first part is written; the next one is planned."),
        ],
    ),
]


def _channels(project: UserProject) -> list[Path]:
    """The turns' channel folders, oldest first."""
    folders = (project.root / ".turnkeeper" / "turns").glob("turn-*")
    return sorted(
        folders, key=lambda f: json.loads((f / "channel.json").read_text())["turn"]["opened_at"]
    )


@pytest.mark.parametrize("cli", ["codex", "claude"])
def test_a_cli_agent_reads_a_large_goal_folded_from_its_snapshot(
    cli: str, make_kit: MakeKit, tmp_path: Path
) -> None:
    kit = make_kit(cli, RULES)
    project = UserProject(tmp_path / "work")
    project.tk("goal", "add", "Write the parser", "--id", "g")
    project.tk("todo", "add", "g", "write the first part", "--id", "t-first")
    project.tk("todo", "add", "g", "hold the rest", "--id", "t-hold")
    project.tk("todo", "block", "t-hold", "--reason", "waits for a person")
    with Project.open(project.root) as opened:
        for i in range(HELD):  # bounded: HELD todos
            opened.todos.add("g", TITLE, todo_id=f"t-held-{i}", depends_on=["t-hold"])
    config = project.host_config(cli, kit.host_config())
    project.tk(
        "session", "create", "g", "--host", cli, "--host-config", config, "--workspace", ".",
    )  # fmt: skip

    project.tk("run", "--json", "--max-turns", "2", timeout=RUN_TIMEOUT)

    first, second = _channels(project)
    # One snapshot of the goal, written by the first turn's channel and linked by both;
    # the second folds the events written since: the todo the first turn added.
    assert os.path.getsize(first / GOAL_FILE) >= WHOLE_BELOW_BYTES
    assert os.path.samefile(first / GOAL_FILE, second / GOAL_FILE)
    assert not (first / GOAL_EVENTS_FILE).exists()
    assert b'"t-next"' in (second / GOAL_EVENTS_FILE).read_bytes()
    answers = [o for r in kit.server.model_requests() for o in r.tool_outputs()]
    view = next(a for a in answers if "Goal g: Write the parser (open)" in a)
    assert "- t-next: write the next part — claimed (this turn's todo)" in view, view
    # The first turn's todo is done and counted; the view lists the unfinished work
    # after the turn's own todo, not the goal's oldest todos.
    assert f"Todos ({HELD} open, 1 claimed, 1 done, 1 blocked):" in view, view
    assert "- t-hold: hold the rest — blocked" in view, view
    assert "- t-first:" not in view, view
    shown = project.tk_json("todo", "show", "t-next")
    assert shown["todo"]["status"] == "done", shown

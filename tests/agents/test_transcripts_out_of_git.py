"""A real CLI's transcript, copied into a workspace by its snapshot, is never committed there.

The agents' project (tests/agents/project.py) keeps its workspace in a repository of
its own, apart from the project's ``.turnkeeper/``: nothing there ignores
``.turnkeeper/``. One turn of the real Codex CLI or Claude Code (against a fake
model) completes, and its snapshot copies the rollout or transcript into
``<workspace>/.turnkeeper/snapshots/``; ``git add -A`` in the workspace must then
stage the agent's work and no file of turnkeeper's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents.conftest import CLI_NAMES, MakeKit, git, kill_marked
from tests.agents.fakes import Rule, Shell, Text
from tests.agents.project import AgentProject

pytestmark = pytest.mark.timeout(180)

RULES = [
    Rule("todo t-a", [Shell("echo done > a.txt"), Text("A is written.")]),
    Rule("todo t-b", [Shell("echo done > b.txt"), Text("B is written.")]),
]


@pytest.fixture(params=CLI_NAMES)
def project(
    request: pytest.FixtureRequest, tmp_path: Path, make_kit: MakeKit
) -> Iterator[AgentProject]:
    made = AgentProject(tmp_path / "project", make_kit(request.param, RULES))
    try:
        yield made
    finally:  # only this test's own control planes and session's processes
        for plane in made.planes:
            plane.stop()
        kill_marked("TURNKEEPER_SESSION_ID", made.session_id)


def test_the_transcript_copy_is_not_staged_by_git_add(project: AgentProject) -> None:
    repo = project.repo
    assert not (repo / ".gitignore").exists()  # a repository of its own: no rules at all
    plane = project.start_run("--max-turns", "1")
    assert plane.wait() == 0, plane.output()

    last = project.session().last_completed
    assert last is not None and last.snapshot.host_artifact_copy is not None
    copy = Path(last.snapshot.host_artifact_copy)
    assert copy.is_file() and copy.is_relative_to(repo / ".turnkeeper")
    git(repo, "add", "-A")
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == "A  a.txt\n"
    assert not (repo / ".gitignore").exists()  # and the user's rules were not touched

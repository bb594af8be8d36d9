"""The example of docs/python.md runs as written: saved as a file, run with this Python.

Its ``python`` code block is extracted, saved as ``notes_agent.py`` (the name the doc
gives it) outside the repository, and run in a child process on a user's git repository
(made by ``turnkeeper init``), as the doc says to run it. It must exit 0 and leave the goal
closed, which the ``turnkeeper`` command then confirms from the shell.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.usage.project import COMMAND_TIMEOUT, UserProject

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"


def example_code() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```", DOC.read_text(), flags=re.M | re.S)
    assert len(blocks) == 1, "docs/python.md has one python example"
    return str(blocks[0])


def test_the_python_doc_example_runs_and_closes_its_goal(
    user_project: UserProject, tmp_path: Path
) -> None:
    script = tmp_path / "tools" / "notes_agent.py"
    script.parent.mkdir()
    script.write_text(example_code())
    repo = user_project.root  # a user's repository, already `turnkeeper init`-ed

    proc = subprocess.run(
        [sys.executable, str(script), str(repo)],
        cwd=tmp_path,
        env=user_project.env(),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "terminal audit passes: True" in proc.stdout
    assert (repo / "first.md").read_text() == "# First note\n"
    assert (repo / "second.md").exists()
    # Initialising again (the example's Project.init) ignores .turnkeeper/ once, still.
    assert (repo / ".gitignore").read_text().splitlines() == [".env", "*.log", ".turnkeeper/"]

    goals = user_project.tk_json("goal", "list")
    assert [g["goal"]["status"] for g in goals] == ["closed"]
    assert [s["status"] for s in user_project.tk_json("session", "list")] == ["closed"]

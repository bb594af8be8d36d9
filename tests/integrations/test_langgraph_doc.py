"""docs/langgraph.md's example runs as written, in a fresh directory."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "langgraph.md"


def test_the_docs_example_runs(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    found = re.search(r"<!-- langgraph-doc-test: example -->\n```python\n(.*?)```", text, re.S)
    assert found is not None
    (tmp_path / "example.py").write_text(found.group(1))
    done = subprocess.run(
        [sys.executable, "example.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    waiting, log, steps = done.stdout.splitlines()
    assert waiting == "('approve',)"
    assert log == "['drafted', 'approved: yes']"
    assert int(steps) == 4  # the input, then one checkpoint after each of three steps

"""The README kept true: its marked shell and Python blocks run as a user would run them.

A block in README.md preceded by ``<!-- readme-test: NAME -->`` is extracted and run,
whole, in a fresh git repository with its own ``.gitignore`` and one commit — the
directory a user would be in — with the installed ``turnkeeper`` first on PATH and
no ``TURNKEEPER_*`` settings. Shell blocks run under ``bash -euo pipefail``, so a
README command that stops working fails here; Python blocks run with the project's
interpreter. Blocks are independent: each gets its own repository.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.usage.project import GIT_IDENTITY

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BLOCK = re.compile(
    r"<!-- readme-test: (?P<name>[\w-]+) -->\s*\n```(?P<lang>sh|python)\n(?P<body>.*?)\n```", re.S
)
# The blocks the README must keep testable: dropping a marker is a failure, not a skip.
REQUIRED = {"quick-tour", "own-agent", "python-api", "revert"}
BLOCK_TIMEOUT = 300.0
# What each block must have achieved, read back through the CLI afterwards: the goal a
# block works must end closed (the quick tour closes its own, and fails if it cannot).
CLOSED_GOAL = {"own-agent": "docs", "python-api": "docs"}


def readme_blocks() -> dict[str, tuple[str, str]]:
    blocks: dict[str, tuple[str, str]] = {}
    for match in BLOCK.finditer(README.read_text(encoding="utf-8")):
        name = match["name"]
        assert name not in blocks, f"two README blocks are named {name}"
        blocks[name] = (match["lang"], match["body"])
    return blocks


def user_environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(home)
    env.update(GIT_IDENTITY)
    return env


def scratch_repository(path: Path, env: dict[str, str]) -> None:
    path.mkdir(parents=True)
    (path / ".gitignore").write_text(".env\n*.log\n__pycache__/\n")
    (path / "README.md").write_text("# a project\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "start"]):
        subprocess.run(["git", *args], cwd=path, env=env, check=True)


def test_the_readme_keeps_its_tested_blocks() -> None:
    missing = REQUIRED - set(readme_blocks())
    assert not missing, sorted(missing)


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_readme_block_runs(name: str, tmp_path: Path) -> None:
    blocks = readme_blocks()
    if name not in blocks:
        pytest.fail(f"README.md has no block marked readme-test: {name}")
    lang, body = blocks[name]
    env = user_environment(tmp_path / "home")
    (tmp_path / "home").mkdir()
    work = tmp_path / "work"
    scratch_repository(work, env)
    script = tmp_path / ("block.sh" if lang == "sh" else "block.py")
    script.write_text(body + "\n", encoding="utf-8")
    command = (
        ["bash", "-euo", "pipefail", str(script)] if lang == "sh" else [sys.executable, str(script)]
    )
    done = subprocess.run(
        command,
        check=False,
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT,
    )
    assert done.returncode == 0, (
        f"README block {name} exited {done.returncode}\n"
        f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )
    assert "Traceback" not in done.stderr, done.stderr
    if name in CLOSED_GOAL:
        shown = subprocess.run(
            ["turnkeeper", "goal", "show", CLOSED_GOAL[name], "--json"],
            check=True,
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
        )
        assert json.loads(shown.stdout)["state"]["goal"]["status"] == "closed", shown.stdout

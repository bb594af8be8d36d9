"""turnkeeper installed without its extras (``pip install turnkeeper``): the embedded
SQLite use works end to end, and what needs an extra says which one to install.

The extras' packages are made unimportable in every process the real ``turnkeeper``
command starts (import_blocker.py, through a ``sitecustomize`` module on PYTHONPATH), as
if they had never been installed. The modules blocked are every one the extras bring
(turnkeeper.extras): a plain install still has uvicorn and starlette (the MCP SDK, a core
dependency, pulls them in), but the core commands must not need them either.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.usage.import_blocker import VARIABLE
from tests.usage.project import UserProject
from turnkeeper.extras import EXTRA_MODULES

REPO = Path(__file__).resolve().parents[2]
BLOCKED = sorted(set().union(*EXTRA_MODULES.values()))
PG_URL = "postgresql://postgres@127.0.0.1:5432/turnkeeper_never_made"
DONE = {"op": "write", "path": "out.txt", "content": "done\n"}


class ProjectWithoutExtras(UserProject):
    """A user's project whose every ``turnkeeper`` process cannot import the extras."""

    def __init__(self, root: Path, hook_dir: Path) -> None:
        self.hook_dir = hook_dir
        super().__init__(root)

    def env(self, **extra: str) -> dict[str, str]:
        blocked = {"PYTHONPATH": f"{self.hook_dir}:{REPO}", VARIABLE: ",".join(BLOCKED)}
        return super().env(**blocked, **extra)


@pytest.fixture
def bare(tmp_path: Path) -> Iterator[ProjectWithoutExtras]:
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(
        "from tests.usage.import_blocker import install\n\ninstall()\n"
    )
    project = ProjectWithoutExtras(tmp_path / "work", hook_dir)
    try:
        yield project
    finally:
        project.close()


def _python(project: ProjectWithoutExtras, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=project.root,
        env=project.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_extras_are_really_out_of_reach(bare: ProjectWithoutExtras) -> None:
    """The block holds: otherwise every test below would pass for nothing."""
    for module in BLOCKED:
        done = _python(bare, f"import {module}")
        assert done.returncode == 1, (module, done.stderr)
        assert f"No module named '{module}'" in done.stderr, done.stderr


def test_init_run_status_and_doctor_work_without_the_extras(bare: ProjectWithoutExtras) -> None:
    # `init` ran in the fixture; the quick tour's steps, a scripted agent's run, status.
    goal = bare.tk("goal", "add", "Ship it", "-c", "it ships", "-q").stdout.strip()
    todo = bare.tk("todo", "add", goal, "Write it", "-q").stdout.strip()
    script = {"turns": [{"steps": [DONE], "result": {"todo_done": True}}]}
    config = bare.host_config("scripted", {"script": script})
    bare.tk("session", "create", goal, "--host", "scripted", "--host-config", config)
    run = bare.tk("run", "--json", "--max-turns", "1")
    assert "Traceback" not in run.stderr, run.stderr
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert (summary["turns"], summary["failed_turns"]) == (1, 0), summary
    assert bare.tk_json("goal", "show", goal)["state"]["todos"][todo]["status"] == "done"
    assert (bare.root / "out.txt").read_text() == "done\n"
    goals = {g["id"]: g for g in bare.tk_json("status")["goals"]}
    assert goals[goal]["audit"]["open_todos"] == 0, goals
    bare.tk("doctor")


def test_serve_names_the_server_extra(bare: ProjectWithoutExtras) -> None:
    done = bare.tk("serve", "--port", "0", expect=6)
    assert "FAILED_PRECONDITION (missing_extra)" in done.stderr, done.stderr
    assert "turnkeeper serve needs the server extra" in done.stderr, done.stderr
    assert "pip install 'turnkeeper[server]'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "admin token" not in done.stdout  # it stopped before making one


@pytest.mark.parametrize(
    "args",
    [
        ("init", "elsewhere", "--database-url", PG_URL),
        ("demo", "--database-url", PG_URL),
        ("chaos", "--mode", "workers", "--database-url", PG_URL),
    ],
    ids=["init", "demo", "chaos-workers"],
)
def test_postgresql_names_the_postgres_extra(
    bare: ProjectWithoutExtras, args: tuple[str, ...]
) -> None:
    done = bare.tk(*args, expect=6)
    assert "Traceback" not in done.stderr, done.stderr
    assert "FAILED_PRECONDITION (missing_extra)" in done.stderr, done.stderr
    assert "needs the postgres extra: pip install 'turnkeeper[postgres]'" in done.stderr


def test_the_missing_extra_as_json(bare: ProjectWithoutExtras) -> None:
    done = bare.tk("init", "elsewhere", "--database-url", PG_URL, "--json", expect=6)
    error = json.loads(done.stdout)["error"]
    assert (error["code"], error["reason"]) == ("FAILED_PRECONDITION", "missing_extra"), error
    assert error["details"]["extra"] == "postgres", error
    assert error["details"]["install"] == "pip install 'turnkeeper[postgres]'", error
    assert not (bare.root / "elsewhere" / ".turnkeeper" / "database-url").exists()


def test_help_imports_none_of_the_extras_modules(tmp_path: Path) -> None:
    """Run with the extras installed (no block): ``--help`` must not import them."""
    installed = [m for m in BLOCKED if importlib.util.find_spec(m) is not None]
    assert "fastapi" in installed and "psycopg" in installed, installed  # else this proves nothing
    code = (
        "import sys\n"
        "from turnkeeper.cli.main import main\n"
        "sys.argv = ['turnkeeper', '--help']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    assert exc.code in (0, None), exc.code\n"
        f"blocked = {BLOCKED!r}\n"
        "print(sorted(m for m in sys.modules if m.partition('.')[0] in blocked))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout

"""What the ``turnkeeper`` command imports before it answers.

Building the command line imports Typer and the CLI's own small modules; Rich, the
store (SQLAlchemy), the kernel (pydantic models), the hosts and the controller are
imported by the commands that use them. So ``--help`` needs none but Rich (Typer's help
is drawn with it), a session listing never imports the session kernel (it reads
projections as JSON), and ``--json`` never imports Rich. Checked on the installed
command's script, by the modules loaded when it exits.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from turnkeeper.cli.goals import CloseReason
from turnkeeper.cli.main import Commands
from turnkeeper.kernel.model import NoFollowUpReason

TIMEOUT = 120.0
NEVER_FOR_HELP = (
    "sqlalchemy",
    "pydantic",
    "turnkeeper.kernel",
    "turnkeeper.store",
    "turnkeeper.runtime.services.goals",
    "turnkeeper.runtime.control.controller",
    "turnkeeper.hosts",
    "turnkeeper_chaos",
)
NEVER_FOR_LISTING = (
    "turnkeeper.kernel.session",
    "turnkeeper.runtime.services.sessions",
    "turnkeeper.runtime.control.controller",
    "turnkeeper.hosts",
)

# status decodes and audits goals (runtime/services/goal_reads.py): the goal kernel's
# events, proposals and decisions, and the goal service that writes with them, are
# for commands that change a goal.
NEVER_FOR_STATUS = (
    "turnkeeper.kernel.events",
    "turnkeeper.kernel.proposals",
    "turnkeeper.kernel.decide",
    "turnkeeper.kernel.evolve",
    "turnkeeper.runtime.services.goals",
)


def _env() -> dict[str, str]:
    # The project is the working directory, as for a user whose shell sets nothing.
    return {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}


# Runs the command as its script does, then names every module in sys.modules at exit:
# ``-X importtime`` would not see one imported through importlib.import_module, which
# is how the lazy group loads a command's module.
_RUN_AND_LIST = """
import atexit, runpy, sys
atexit.register(lambda: sys.stderr.write("modules: " + " ".join(sorted(sys.modules)) + "\\n"))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _imported(*args: str, cwd: Path) -> set[str]:
    """Every module ``turnkeeper ARGS`` imports (it must succeed)."""
    script = Path(sys.executable).with_name("turnkeeper")
    proc = subprocess.run(
        [sys.executable, "-c", _RUN_AND_LIST, str(script), *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    listed = [ln for ln in proc.stderr.splitlines() if ln.startswith("modules: ")]
    assert len(listed) == 1, proc.stderr[-4000:]
    modules = set(listed[0].split()[1:])
    assert "typer" in modules, "the command imported nothing: the check would see nothing"
    return modules


def _among(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


@pytest.mark.parametrize("args", [("--help",), ("goal", "--help"), ("session", "--help")])
def test_help_imports_neither_store_nor_kernel(args: tuple[str, ...], tmp_path: Path) -> None:
    modules = _imported(*args, cwd=tmp_path)
    heavy = _among(modules, NEVER_FOR_HELP)
    if args == ("--help",):
        # The top-level listing imports no command's module (cli/lazy_group.py).
        heavy += _among(modules, tuple(e.target.split(":")[0] for e in Commands.LAZY))
    else:
        # Typer itself builds its parameter converters on pydantic for a subcommand.
        heavy = [m for m in heavy if not m.startswith("pydantic")]
    assert heavy == []
    assert "typer.rich_utils" in modules, "help is drawn by Typer's renderer"


@pytest.mark.parametrize(
    "args", [("session", "list"), ("session", "list", "--json"), ("status", "--json")]
)
def test_a_listing_never_imports_the_session_kernel(args: tuple[str, ...], tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli.main", "init", str(tmp_path)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        timeout=TIMEOUT,
        check=True,
    )
    modules = _imported(*args, cwd=tmp_path)
    assert "turnkeeper.runtime.services.session_listing" in modules
    assert _among(modules, NEVER_FOR_LISTING) == []


def test_goal_close_offers_the_kernels_reasons() -> None:
    """``--reason``'s choices are spelled in the CLI so that its help needs no kernel."""
    assert [r.value for r in CloseReason] == [r.value for r in NoFollowUpReason]


@pytest.mark.parametrize("args", [("session", "list", "--json"), ("status", "--json")])
def test_json_output_never_imports_rich(args: tuple[str, ...], tmp_path: Path) -> None:
    """``--json`` prints through ``json`` alone: Rich's console is made on first use."""
    subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli.main", "init", str(tmp_path)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        timeout=TIMEOUT,
        check=True,
    )
    assert _among(_imported(*args, cwd=tmp_path), ("rich",)) == []


@pytest.mark.parametrize("args", [("status",), ("goal", "list")])
def test_everyday_commands_never_import_sqlalchemy(args: tuple[str, ...], tmp_path: Path) -> None:
    """On SQLite a store at its schema's head is opened and read on plain ``sqlite3``
    connections: SQLAlchemy (~130 ms of import) and Alembic are for migrations."""
    for command in (["git", "init", "-q"], [sys.executable, "-m", "turnkeeper.cli.main", "init"]):
        subprocess.run(
            command, cwd=tmp_path, env=_env(), capture_output=True, timeout=TIMEOUT, check=True
        )
    modules = _imported(*args, cwd=tmp_path)
    assert "turnkeeper.store.sql" in modules  # the command did open the store
    assert _among(modules, ("sqlalchemy", "alembic")) == []
    # Nor verify's and repair's code, which only they run, nor the append path (its
    # writer is made by the first append): these commands only read.
    only_others = ("turnkeeper.store._verify", "turnkeeper.store._verify_index")
    assert _among(modules, (*only_others, "turnkeeper.store._writer")) == []
    if args == ("status",):
        # status decodes and audits goals, and decides nothing (kernel/__init__.py).
        assert "turnkeeper.kernel.audit" in modules
        assert _among(modules, NEVER_FOR_STATUS) == []

"""The whole kernel (goal and session) is pure: it imports nothing outward, no clock,
no randomness, no I/O. Checked on the source of every kernel module, so a new module
or a new package of turnkeeper is covered without naming it here."""

from __future__ import annotations

import ast
from pathlib import Path

import turnkeeper
import turnkeeper.kernel as kernel_pkg

PACKAGE_ROOT = Path(turnkeeper.__file__).parent
KERNEL_ROOT = Path(kernel_pkg.__file__).parent
# What the kernel may import from turnkeeper: itself, the error taxonomy, and the words
# and the records it shares with the hosts, and the one definition of JSON's types.
ALLOWED_INSIDE = {
    *("turnkeeper.kernel", "turnkeeper.errors", "turnkeeper.vocabulary"),
    *("turnkeeper.host_reports", "turnkeeper.json_types"),
}
IMPURE = {
    *("random", "secrets", "time", "os", "subprocess", "socket", "pickle", "sqlite3"),
    *("pathlib", "shutil", "tempfile", "urllib", "http", "sqlalchemy", "psycopg"),
}
# ``uuid`` may parse an id; it must not make one (uuid1 reads the clock, uuid4 chance).
CLOCK_OR_CHANCE = {"now", "utcnow", "today", "uuid1", "uuid4", "urandom", "token_hex"}


def _outward() -> set[str]:
    """Every turnkeeper package and module outside the kernel."""
    names = {p.stem for p in PACKAGE_ROOT.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in PACKAGE_ROOT.iterdir() if (p / "__init__.py").exists()}
    return {f"turnkeeper.{n}" for n in names} - ALLOWED_INSIDE


def _imports(path: Path) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


def test_the_outward_packages_are_found() -> None:
    outward = _outward()
    for name in ("turnkeeper.runtime", "turnkeeper.store", "turnkeeper.hosts", "turnkeeper.cli"):
        assert name in outward
    assert "turnkeeper.kernel" not in outward


def test_every_kernel_module_is_pure() -> None:
    outward = _outward()
    modules = sorted(KERNEL_ROOT.rglob("*.py"))
    assert len(modules) > 20  # the goal kernel and the session kernel both
    for path in modules:
        where = path.relative_to(KERNEL_ROOT)
        for name in _imports(path):
            top = ".".join(name.split(".")[:2])
            assert top not in outward, (where, name)
            assert name.split(".")[0] not in IMPURE, (where, name)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                assert node.attr not in CLOCK_OR_CHANCE, (where, node.attr)

"""``turnkeeper.kernel`` imports each name from its module when first asked for: the
table the interpreter uses and the imports type checkers see name the same objects,
and a reader of goal states and audits imports no events, proposals or decisions."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from turnkeeper import kernel

TIMEOUT = 60.0


def _type_checking_names() -> set[str]:
    """The names ``kernel/__init__.py`` imports under ``TYPE_CHECKING``."""
    tree = ast.parse(Path(kernel.__file__).read_text())
    (block,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    ]
    return {
        alias.asname or alias.name
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


# Imported with the package: the state and its audit (``audit`` the function).
EAGER = {"Blocker", "BlockerKind", "TerminalAudit", "audit", "GoalState"}


def test_every_exported_name_is_in_the_table_and_seen_by_type_checkers() -> None:
    assert set(kernel._LAZY) == _type_checking_names() == set(kernel.__all__) - EAGER


def test_audit_names_the_function_though_its_module_is_imported() -> None:
    import turnkeeper.kernel.audit as audit_module  # noqa: F401  (binds nothing new)

    assert callable(kernel.audit)
    assert kernel.audit is sys.modules["turnkeeper.kernel.audit"].audit


def test_every_exported_name_is_its_modules_own() -> None:
    for name in kernel.__all__:
        module = kernel._LAZY.get(name, "audit" if name != "GoalState" else "model")
        value = getattr(kernel, name)
        if module:
            owner = sys.modules[f"turnkeeper.kernel.{module}"]
            assert value is getattr(owner, name), name
        else:
            assert value is sys.modules[f"turnkeeper.kernel.{name}"], name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        kernel.no_such_name  # noqa: B018


def test_reading_and_auditing_goals_imports_no_decision() -> None:
    """What ``status`` needs of the kernel: the state model and the audit."""
    probe = (
        "import sys\n"
        "from turnkeeper.kernel import GoalState, TerminalAudit, audit\n"
        "import turnkeeper.runtime.services.goal_reads\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('turnkeeper.'))))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    modules = set(proc.stdout.split())
    assert "turnkeeper.kernel.audit" in modules  # the probe did import the audit
    heavy = {
        *("turnkeeper.kernel.events", "turnkeeper.kernel.proposals"),
        *("turnkeeper.kernel.decide", "turnkeeper.kernel.evolve"),
        *("turnkeeper.kernel._obligations", "turnkeeper.runtime.services.goals"),
    }
    assert modules & heavy == set()

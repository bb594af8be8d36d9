"""The store's SQL lives in one module, ``turnkeeper/store/_statements.py``.

Every other module of the store is read as Python (its syntax tree): no string
literal outside a docstring may hold an SQL statement's keyword. The migrations keep
their own SQL (a migration is frozen at its revision) and are not read.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

STORE_DIR = Path(__file__).resolve().parents[2] / "turnkeeper" / "store"
STATEMENTS = "_statements.py"
_KEYWORD = re.compile(r"\b(INSERT|SELECT|UPDATE|DELETE|CREATE)\b")


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the nodes that are docstrings (a body's first string expression)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def sql_literals(source: str) -> list[str]:
    """Every string literal of ``source`` (f-string pieces included), docstrings
    excepted, that holds an SQL keyword."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and _KEYWORD.search(node.value)
    ]


def test_no_store_module_but_one_holds_sql() -> None:
    modules = sorted(STORE_DIR.glob("*.py"))
    assert len(modules) > 20  # the store's modules were found
    holding = {
        path.name: found
        for path in modules
        if path.name != STATEMENTS and (found := sql_literals(path.read_text(encoding="utf-8")))
    }
    assert holding == {}


def test_the_statements_module_holds_the_store_sql() -> None:
    found = sql_literals((STORE_DIR / STATEMENTS).read_text(encoding="utf-8"))
    assert len(found) >= 20
    assert any(s.startswith("INSERT INTO events") for s in found)
    # Each backend's own statements too: SQLite's and PostgreSQL's (the dialect's, and
    # the demo's database administration).
    assert any(s.startswith("SELECT type, name, tbl_name, coalesce(sql") for s in found)
    assert any(s.startswith("SELECT pg_advisory_xact_lock") for s in found)
    assert any(s.startswith("CREATE DATABASE") for s in found)


def test_the_check_sees_sql_in_a_literal_but_not_in_a_docstring() -> None:
    source = '''
"""A module whose docstring says SELECT."""

def read(conn):
    """SELECT in a docstring is prose."""
    return conn.execute(f"SELECT x FROM {TABLE}")

LABEL = "an update"
'''
    assert sql_literals(source) == ["SELECT x FROM "]

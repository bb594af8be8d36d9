"""CLI tests run the real Typer app against a real SQLite file in a temp project."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from turnkeeper.cli.main import app

Invoke = Callable[..., Result]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TURNKEEPER_DIR", str(tmp_path))
    monkeypatch.setenv("TURNKEEPER_OWNER", "tester")
    monkeypatch.delenv("TURNKEEPER_DATABASE_URL", raising=False)
    result = CliRunner().invoke(app, ["init", str(tmp_path)])
    assert result.exit_code == 0, result.output
    return tmp_path


@pytest.fixture
def tk(project: Path) -> Invoke:
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None) -> Result:
        return runner.invoke(app, list(args), input=input)

    return invoke


def with_json(args: tuple[str, ...]) -> list[str]:
    """``args`` plus ``--json``, placed before a ``--`` that starts a command to run."""
    if "--" in args:
        cut = args.index("--")
        return [*args[:cut], "--json", *args[cut:]]
    return [*args, "--json"]


def run_json(tk: Invoke, *args: str, expect: int = 0) -> Any:
    result = tk(*with_json(args))
    assert result.exit_code == expect, result.output
    return json.loads(result.stdout)


def db_path(project: Path) -> Path:
    return project / ".turnkeeper" / "turnkeeper.db"


def durable_digest(project: Path) -> str:
    """A digest of every durable row: equal before and after means nothing was written."""
    conn = sqlite3.connect(db_path(project))
    try:
        digest = hashlib.sha256()
        for table in ("events", "projections", "entity_index"):
            for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2"):
                digest.update(repr(row).encode())
        return digest.hexdigest()
    finally:
        conn.close()

"""Where a project's turnkeeper state lives: the ``.turnkeeper/`` directory.

A project is found like git finds a repository: from the working directory
upwards. ``TURNKEEPER_DIR`` overrides the search (tests, scripts). The store is the
SQLite file ``.turnkeeper/turnkeeper.db`` unless ``init --database-url`` recorded
another (PostgreSQL) in ``.turnkeeper/database-url``; ``TURNKEEPER_DATABASE_URL``
overrides both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from turnkeeper.errors import FailedPrecondition

STATE_DIR_NAME = ".turnkeeper"
DB_FILE_NAME = "turnkeeper.db"
# The database a project uses when it is not the SQLite file (it may hold a password:
# written readable by its owner only, inside the git-ignored state directory).
DATABASE_URL_FILE = "database-url"


@dataclass(frozen=True)
class Project:
    root: Path  # the directory that holds .turnkeeper/

    @property
    def state_dir(self) -> Path:
        return self.root / STATE_DIR_NAME

    @property
    def tools_dir(self) -> Path:
        """Where the turns' tool channels live (turnkeeper/tools/channel.py)."""
        return self.state_dir / "turns"

    @property
    def database_url(self) -> str:
        override = os.environ.get("TURNKEEPER_DATABASE_URL")
        if override:
            return override
        recorded = self.state_dir / DATABASE_URL_FILE
        if recorded.is_file():
            text = recorded.read_text().strip()
            if text:
                return text
        return f"sqlite:///{self.state_dir / DB_FILE_NAME}"


def init_project(root: Path, database_url: str | None = None) -> tuple[Project, bool]:
    """Create ``root/.turnkeeper`` and ignore it in git; return (project, created).
    ``database_url`` records the database the project uses instead of its SQLite file."""
    root = root.resolve()
    state_dir = root / STATE_DIR_NAME
    created = not state_dir.exists()
    state_dir.mkdir(parents=True, exist_ok=True)
    _ensure_gitignored(root)
    if database_url:
        target = state_dir / DATABASE_URL_FILE
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(database_url.strip() + "\n")
    return Project(root), created


def _ensure_gitignored(root: Path) -> None:
    # Session handles, transcripts and leases are private runtime state, on the
    # private side of the public/private boundary: never committed by accident.
    gitignore = root / ".gitignore"
    entry = f"{STATE_DIR_NAME}/"
    lines = gitignore.read_text().splitlines() if gitignore.exists() else []
    if entry in lines or STATE_DIR_NAME in lines:
        return
    prefix = "" if not lines or gitignore.read_text().endswith("\n") else "\n"
    with gitignore.open("a") as handle:
        handle.write(f"{prefix}{entry}\n")


def find_project(start: Path | None = None) -> Project:
    """The nearest project at or above ``start`` (default: cwd)."""
    explicit = os.environ.get("TURNKEEPER_DIR")
    if explicit:
        root = Path(explicit).resolve()
        if (root / STATE_DIR_NAME).is_dir():
            return Project(root)
        raise FailedPrecondition(
            f"TURNKEEPER_DIR={explicit} holds no {STATE_DIR_NAME}/ (run `turnkeeper init` there)",
            reason="project_not_initialised",
        )
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / STATE_DIR_NAME).is_dir():
            return Project(candidate)
    raise FailedPrecondition(
        f"no {STATE_DIR_NAME}/ here or above {here} (run `turnkeeper init`)",
        reason="project_not_initialised",
    )

"""``turnkeeper init --database-url`` as a user runs it: the project's state moves to
PostgreSQL, every later command uses it, and a wrong URL is refused with nothing recorded."""

from __future__ import annotations

import stat

from tests.pg import closed_port_url
from tests.usage.project import UserProject


def test_init_records_the_database_and_every_command_uses_it(
    user_project: UserProject, postgres_url: str
) -> None:
    done = user_project.tk_json("init", "--database-url", postgres_url)
    assert done["database"].startswith("postgresql://")
    recorded = user_project.root / ".turnkeeper" / "database-url"
    assert recorded.read_text().strip() == postgres_url
    assert stat.S_IMODE(recorded.stat().st_mode) == 0o600  # a URL may hold a password
    goal = user_project.tk("goal", "add", "On the server", "-c", "done", "-q").stdout.strip()
    status = user_project.tk_json("status")
    assert [g["id"] for g in status["goals"]] == [goal]
    assert user_project.tk("verify").returncode == 0
    # The SQLite file init made first holds none of it: the goal lives on the server.
    sqlite_file = {"TURNKEEPER_DATABASE_URL": f"sqlite:///{user_project.database}"}
    assert user_project.tk("status", "--json", env=sqlite_file).json()["goals"] == []


def test_an_unreachable_database_is_refused_and_nothing_is_recorded(
    user_project: UserProject, postgres_url: str
) -> None:
    done = user_project.tk("init", "--database-url", closed_port_url(postgres_url), expect=9)
    assert "UNAVAILABLE" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not (user_project.root / ".turnkeeper" / "database-url").exists()
    assert user_project.tk_json("status")["goals"] == []  # still the SQLite file

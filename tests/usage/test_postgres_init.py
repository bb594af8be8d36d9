"""``turnkeeper init --database-url`` as a user runs it: the project's state moves to
PostgreSQL, every later command uses it, and a wrong URL is refused with nothing recorded."""

from __future__ import annotations

import signal
import stat
import time

from tests.pg import closed_port_url
from tests.usage.project import Background, UserProject, wait_for


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


def test_a_new_session_wakes_an_idle_worker_long_before_its_poll(
    user_project: UserProject, postgres_url: str
) -> None:
    """LISTEN/NOTIFY: a worker polling once a minute starts a session created from
    another shell within seconds, woken by the create."""
    user_project.tk("init", "--database-url", postgres_url)
    worker = user_project.start("run", "--worker", "--poll", "60", "--json")
    try:
        time.sleep(3)  # its first scan found nothing: it waits for a wake-up or 60 s
        agent = user_project.agent("agent.sh", AGENT)
        config = user_project.host_config("agent", {"command": [str(agent)]})
        goal = user_project.tk("goal", "add", "Woken", "-c", "ran", "-q").stdout.strip()
        user_project.tk("todo", "add", goal, "Run once")
        created = time.monotonic()
        user_project.tk("session", "create", goal, "--host", "subprocess", "--host-config", config)
        wait_for(lambda: _planned(worker), 30, "the worker to start a turn")
        assert time.monotonic() - created < 30  # far inside the 60 s poll
    finally:
        worker.signal(signal.SIGTERM)
        worker.wait(timeout=60)


AGENT = "#!/bin/sh\necho ran\n"


def _planned(worker: Background) -> bool:
    return any(r.get("event") == "turn_planned" for r in worker.json_lines())

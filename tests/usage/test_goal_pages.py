"""A large goal is read a page at a time: ``goal show`` gives one window of the todos
and evidence records and says how many are past it; the pages together hold every
todo once (the API's and the web's pages: tests/api/test_goal_pages.py)."""

from __future__ import annotations

import pytest

from tests.usage.project import UserProject

TODOS = 7


@pytest.fixture
def big_goal(user_project: UserProject) -> UserProject:
    user_project.tk("goal", "add", "Ship the parser", "--id", "g")
    for i in range(TODOS):
        user_project.tk("todo", "add", "g", f"part {i}", "--id", f"t{i}")
    return user_project


def test_goal_show_pages_the_todos_and_says_how_many_more(big_goal: UserProject) -> None:
    first = big_goal.tk("goal", "show", "g", "--limit", "3", env={"COLUMNS": "200"}).stdout
    assert "Todos" in first and "part 2" in first
    # One blocker per open todo: paged alike, while the counter counts them all.
    assert first.count("blocker open_todo") == 3
    assert "4 more blockers" in first
    assert "4 more todos" in first and "--offset 3" in first
    last = big_goal.tk("goal", "show", "g", "--limit", "3", "--offset", "6").stdout
    assert "part 6" in last and "more todos" not in last


def test_goal_show_json_holds_one_page_and_its_totals(big_goal: UserProject) -> None:
    seen: list[str] = []
    offset: int | None = 0
    while offset is not None:
        shown = big_goal.tk_json("goal", "show", "g", "--limit", "3", "--offset", str(offset))
        assert shown["page"]["todos_total"] == TODOS
        expected_next = offset + 3 if offset + 3 < TODOS else None
        assert shown["page"]["next_offset"] == expected_next
        assert len(shown["state"]["todos"]) <= 3
        assert len(shown["audit"]["blockers"]) <= 3
        assert shown["audit"]["open_todos"] == TODOS
        seen += list(shown["state"]["todos"])
        offset = offset + 3 if offset + 3 < TODOS else None
    assert seen == [f"t{i}" for i in range(TODOS)]


def test_goal_show_refuses_a_page_too_large(big_goal: UserProject) -> None:
    refused = big_goal.tk("goal", "show", "g", "--limit", "5000", expect=None)
    assert refused.returncode != 0
    assert "not within 1..1000" in refused.stdout + refused.stderr

"""The API's goal route and the web's goal page give a large goal a page at a time,
saying how many todos and evidence records are past the page and where the next starts."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.conftest import ADMIN, GOAL, ApiProject
from turnkeeper.kernel.proposals import AddTodo, TodoSpec
from turnkeeper.runtime.services.goals import GoalService


def test_the_goal_route_pages_and_names_the_next_page(api_project: ApiProject) -> None:
    goals = GoalService(api_project.store)
    for i in range(5):  # t1 and t2 are there already
        goals.submit(GOAL, AddTodo(todo=TodoSpec(todo_id=f"x{i}", title=f"more {i}")))
    headers = api_project.headers()
    first = api_project.client.get(f"/v1/goals/{GOAL}?limit=4", headers=headers).json()
    assert list(first["state"]["todos"]) == ["t1", "t2", "x0", "x1"]
    assert first["page"] == {
        "offset": 0,
        "limit": 4,
        "todos_total": 7,
        "evidence_total": 0,
        "todos_after": 3,
        "evidence_after": 0,
        "next_offset": 4,
    }
    second = api_project.client.get(f"/v1/goals/{GOAL}?limit=4&offset=4", headers=headers).json()
    assert list(second["state"]["todos"]) == ["x2", "x3", "x4"]
    assert second["page"]["next_offset"] is None
    todos = api_project.client.get(f"/v1/goals/{GOAL}/todos?offset=5&limit=1", headers=headers)
    assert [t["id"] for t in todos.json()] == ["x3"]
    too_big = api_project.client.get(f"/v1/goals/{GOAL}?limit=1001", headers=headers)
    assert too_big.status_code == 400  # a typed invalid_argument, as every bad input


def test_the_goal_page_shows_one_page_with_links_to_the_next(api_project: ApiProject) -> None:
    goals = GoalService(api_project.store)
    for i in range(60):
        goals.submit(GOAL, AddTodo(todo=TodoSpec(todo_id=f"x{i:02d}", title=f"more {i}")))
    browser = TestClient(api_project.app)
    landed = browser.get(f"/?token={ADMIN}", follow_redirects=False)  # signs in: a cookie
    assert landed.status_code == 303, landed.text
    page = browser.get(f"/goals/{GOAL}").text
    assert 'data-todo="x47"' in page and 'data-todo="x48"' not in page  # 50: t1, t2, x00-x47
    assert 'href="?offset=50"' in page
    # A blocker per open todo: 50 listed, the counter counting all 62.
    assert page.count('data-blocker="open_todo"') == 50
    assert 'data-counter="open_todos"><span class="value">62<' in page
    second = browser.get(f"/goals/{GOAL}?offset=50").text
    assert 'data-todo="x48"' in second and 'data-todo="x59"' in second
    assert 'data-todo="t1"' not in second and 'href="?offset=0"' in second


def test_the_goal_list_gives_each_goal_one_page(api_project: ApiProject) -> None:
    goals = GoalService(api_project.store)
    for i in range(3):  # t1 and t2 are there already
        goals.submit(GOAL, AddTodo(todo=TodoSpec(todo_id=f"x{i}", title=f"more {i}")))
    listed = api_project.client.get("/v1/goals?limit=2", headers=api_project.headers()).json()
    (state,) = listed["goals"]
    (page,) = listed["pages"]
    assert list(state["todos"]) == ["t1", "t2"]
    assert (page["todos_total"], page["todos_after"], page["next_offset"]) == (5, 3, 2)
    rest = api_project.client.get("/v1/goals?limit=2&offset=4", headers=api_project.headers())
    assert list(rest.json()["goals"][0]["todos"]) == ["x2"]

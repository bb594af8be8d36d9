"""A workspace path the system cannot use is a typed refusal over HTTP, never a 500.

``POST /v1/sessions`` takes any workspace of up to 4,096 characters by its schema;
before the fix a 300-character one (one name longer than the file system allows) was
``500 INTERNAL`` (``OSError: File name too long``). Each case goes through a real
uvicorn on each backend, and each refusal writes nothing.
"""

from __future__ import annotations

import httpx
import pytest

from tests.api.conftest import ADMIN, GOAL, ApiProject, served

LONG_NAME = "a" * 300  # one name: NAME_MAX is 255
OVER_SCHEMA = "b" * 5000  # past the schema's maxLength (4,096)
DEEP = "c/" * 2047 + "c"  # 4,095 characters of short names: within the schema


@pytest.mark.parametrize(
    ("workspace", "status", "reason"),
    [
        (LONG_NAME, 400, "bad_workspace_path"),
        (OVER_SCHEMA, 400, "invalid_request"),
        (DEEP, 400, "no_workspace"),
        ("loop/inside", 400, "bad_workspace_path"),
        ("README/inside", 400, "no_workspace"),
    ],
    ids=["300-char-name", "5000-chars", "4095-chars-deep", "symlink-loop", "file-component"],
)
def test_an_unusable_workspace_path_is_a_typed_refusal(
    api_project: ApiProject, workspace: str, status: int, reason: str
) -> None:
    (api_project.root / "loop").symlink_to("loop")  # a link to itself: ELOOP
    before = api_project.digest()
    body = {"goal_id": GOAL, "host": "scripted", "workspace": workspace}
    with served(api_project.app) as base:
        answer = httpx.post(
            f"{base}/v1/sessions",
            json=body,
            headers={"Authorization": f"Bearer {ADMIN}"},
            timeout=30,
        )
    assert answer.status_code == status, answer.text[:1000]
    error = answer.json()["error"]
    assert (error["code"], error["reason"]) == ("INVALID_ARGUMENT", reason), error
    # The message says what is wrong and names the path, clipped: not 5,000 characters.
    assert len(error["message"]) < 600, error["message"]
    if reason != "invalid_request":
        shown = error["details"]["workspace"]
        assert shown.startswith(str(api_project.root)), shown
        assert shown in error["message"]
        if len(workspace) > 200:
            assert "…" in shown and "characters)" in shown, shown
    assert api_project.digest() == before  # refused before anything was written

"""A key in a session's configuration sent over the API: refused as the CLI refuses
it (400 INVALID_ARGUMENT, ``secret_in_config``, the field named, the value never
echoed), with nothing written (each backend)."""

from __future__ import annotations

from tests.api.conftest import GOAL, ApiProject
from tests.boundary.fakes import openai_key


def test_a_key_in_a_host_config_is_refused_over_the_api(api_project: ApiProject) -> None:
    key = openai_key()
    before = api_project.digest()
    body = {
        "goal_id": GOAL,
        "host": "scripted",
        "host_config": {
            "state_dir": str(api_project.root.parent / "host-state"),
            "script": {"turns": []},
            "env": {"OPENAI_API_KEY": key},
        },
    }
    answer = api_project.client.post(
        "/v1/sessions", json=body, headers={**api_project.headers(), "Idempotency-Key": "k1"}
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["reason"]) == ("INVALID_ARGUMENT", "secret_in_config")
    assert error["details"] == {"field": "env.OPENAI_API_KEY"}
    assert key not in answer.text
    assert api_project.digest() == before  # nothing written
    listed = api_project.client.get("/v1/sessions", headers=api_project.headers())
    assert key not in listed.text and len(listed.json()["sessions"]) == 1

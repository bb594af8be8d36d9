"""The OpenAPI description: the checked-in copy is what the app serves, and the served
one holds up against schemathesis on each backend (a real uvicorn, a real project).

Schemathesis generates requests for every operation from the served description and
checks each answer: never a 5xx, status and content type documented, the body valid
against its schema. The live event stream is left out of the generated calls (it
follows a session until the client hangs up; tests/api/test_events_sse.py covers it).
Examples per operation are bounded so a backend takes a minute or so. Left out is
the check that every schema-valid request is accepted: the kernel refuses, as
INVALID_ARGUMENT, values no JSON schema spells out (an empty title after trimming,
an unknown proposal kind, a cadence it finds out of range).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import positive_data_acceptance
from schemathesis.core.result import Ok

from tests.api.conftest import ADMIN, ApiProject, make_project, served, write_turn

CHECKED_IN = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
EXAMPLES = 8


def test_the_checked_in_description_is_the_served_one(api_project: ApiProject) -> None:
    answer = api_project.client.get("/v1/openapi.json", headers=api_project.headers())
    assert answer.status_code == 200
    served_text = json.dumps(answer.json(), indent=2, sort_keys=True) + "\n"
    assert CHECKED_IN.read_text() == served_text, (
        "docs/openapi.json is stale: regenerate it with "
        "`.venv/bin/python -m turnkeeper.server.openapi > docs/openapi.json`"
    )


@pytest.fixture
def served_project(backend: str, tmp_path: Path) -> Iterator[tuple[ApiProject, str]]:
    project = make_project(backend, tmp_path, [write_turn("write a", "a.txt", "A\n")])
    project.run_turns(1)  # a turn, a snapshot, host events: something real to read
    try:
        with served(project.app) as base:
            yield project, base
    finally:
        project.client.close()
        project.store.close()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_the_served_description_holds(
    served_project: tuple[ApiProject, str], mode: GenerationMode
) -> None:
    _, base = served_project
    auth = {"Authorization": f"Bearer {ADMIN}"}
    loaded = schemathesis.openapi.from_url(f"{base}/v1/openapi.json", headers=auth)
    schema = loaded.exclude(path="/v1/sessions/{session_id}/events")
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result  # the description itself is sound
        operations.append(result.ok())
    assert len(operations) > 30
    failures: list[str] = []
    calls: list[int] = []
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def check(case: schemathesis.Case[Any]) -> None:
            calls.append(1)
            case.call_and_validate(
                base_url=base, headers=auth, timeout=30, excluded_checks=[positive_data_acceptance]
            )

        try:
            check()
        except (Exception, BaseExceptionGroup) as exc:  # every operation is tried
            failures.append(f"{operation.label}: {exc}")
    assert failures == [], "\n\n".join(failures)
    assert len(calls) > 3 * len(operations)  # the check really called the server

"""A goal's per-key evidence index, carried from state to state by ``evolve``, answers
what a state rebuilt from its JSON answers: the same records per key in run-time order
(ties in log order), the same latest record, the same keys; and a copy of a state with
other evidence (a page of it) never answers from its source's index."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from turnkeeper.kernel.events import EvidenceRecorded, GoalCreated
from turnkeeper.kernel.evolve import evolve_goal
from turnkeeper.kernel.model import GoalState

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RECORDS = st.lists(
    st.tuples(st.sampled_from(["tests", "lint", "build"]), st.integers(0, 5), st.integers(0, 1)),
    max_size=30,
)


def _created() -> GoalState:
    created = GoalCreated(
        goal_id="g", title="t", objective="", criteria=[], agents_requiring_vision=[], at=T0
    )
    return evolve_goal(None, created)


def _recorded(i: int, key: str, minute: int, exit_code: int) -> EvidenceRecorded:
    return EvidenceRecorded(
        evidence_id=f"e{i}",
        key=key,
        command=f"run {key}",
        revision=None,
        tree=None,
        exit_code=exit_code,
        output_digest="",
        output_tail="",
        recorded_at=T0 + timedelta(minutes=minute),
        freshness_seconds=60,
        at=T0,
    )


@settings(max_examples=60, deadline=None)
@given(records=RECORDS, asked_at=st.integers(0, 30))
def test_the_carried_index_answers_as_a_state_read_afresh(
    records: list[tuple[str, int, int]], asked_at: int
) -> None:
    state = _created()
    for i, (key, minute, exit_code) in enumerate(records):
        if i == asked_at:
            state.latest_evidence("tests")  # builds the index midway: carried from here on
        state = evolve_goal(state, _recorded(i, key, minute, exit_code))
    afresh = GoalState.model_validate_json(state.model_dump_json())
    assert state == afresh
    assert state.evidence_keys() == afresh.evidence_keys()
    assert state.evidence_keys() == list(dict.fromkeys(key for key, _, _ in records))
    for key in ("tests", "lint", "build"):
        expected = sorted(
            (e for e in state.evidence.values() if e.key == key), key=lambda e: e.recorded_at
        )
        assert state.evidence_for_key(key) == expected == afresh.evidence_for_key(key)
        assert state.latest_evidence(key) == (expected[-1] if expected else None)


def test_a_copy_with_other_evidence_builds_its_own_index() -> None:
    state = _created()
    for i in range(4):
        state = evolve_goal(state, _recorded(i, "tests", i, 0))
    before = state.latest_evidence("tests")
    assert before is not None and before.id == "e3"
    first_two = dict(list(state.evidence.items())[:2])
    page = state.model_copy(update={"evidence": first_two})
    latest = page.latest_evidence("tests")
    assert latest is not None and latest.id == "e1"
    assert state.latest_evidence("tests") == before  # the source's answer is unchanged

"""The text limits: one type and one maximum per kind of field, the same in every layer."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from turnkeeper.errors import InvalidArgument
from turnkeeper.host_reports import ID_MAX_CHARS
from turnkeeper.kernel import decide_and_evolve, fold_goal, parse_proposal
from turnkeeper.kernel.events import GoalCreated, TodoAdded
from turnkeeper.kernel.limits import (
    DURATION_MAX_SECONDS,
    JSON_DEPTH_MAX,
    TEXT_MAX_CHARS,
    TITLE_MAX_CHARS,
    Id,
    Text,
    Title,
    fit_title,
    json_problem,
    load_json,
)
from turnkeeper.kernel.proposals import ClaimTodo, TodoSpec, checked_input
from turnkeeper.kernel.session import RunnableTodo
from turnkeeper.kernel.session.events import SessionCreated

ID: TypeAdapter[str] = TypeAdapter(Id)
TITLE: TypeAdapter[str] = TypeAdapter(Title)
TEXT: TypeAdapter[str] = TypeAdapter(Text)

CONTROL = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))]
# Printable text: no control characters (Cc), surrogates (Cs) or separators (Z*), so
# also none of the line breaks and whitespace an id or a title must not hold.
printable = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp", "Zs")), max_size=80
)


def reason_of(adapter: TypeAdapter[str], value: str) -> str:
    with pytest.raises(ValidationError) as info:
        adapter.validate_python(value)
    return str(info.value.errors()[0]["type"])


@given(printable)
def test_printable_text_is_an_id_a_title_and_text(value: str) -> None:
    assert ID.validate_python(value) == value
    assert TITLE.validate_python(value) == value
    assert TEXT.validate_python(value) == value


@given(printable, st.sampled_from(CONTROL), printable)
def test_a_control_character_is_refused_by_ids_and_titles(a: str, ch: str, b: str) -> None:
    value = a + ch + b
    assert reason_of(ID, value) == "control_characters"
    assert reason_of(TITLE, value) == "control_characters"
    if ch in "\n\t":
        assert TEXT.validate_python(value) == value  # free text keeps lines and tabs
    else:
        assert reason_of(TEXT, value) == "control_characters"


@given(printable, st.sampled_from([" ", "\u00a0", "\u2003", "\u3000"]), printable)
def test_whitespace_makes_an_invalid_id_but_a_fine_title(a: str, space: str, b: str) -> None:
    assert reason_of(ID, a + space + b) == "invalid_id"
    assert TITLE.validate_python(a + space + b) == a + space + b


@given(printable, st.integers(min_value=0xD800, max_value=0xDFFF))
def test_a_lone_surrogate_is_not_utf8(value: str, code: int) -> None:
    # What Python makes of argv bytes that are not UTF-8 (surrogateescape).
    for adapter in (ID, TITLE, TEXT):
        assert reason_of(adapter, value + chr(code)) == "not_utf8"


@pytest.mark.parametrize(
    ("adapter", "maximum"), [(ID, ID_MAX_CHARS), (TITLE, TITLE_MAX_CHARS), (TEXT, TEXT_MAX_CHARS)]
)
def test_each_kind_has_one_maximum(adapter: TypeAdapter[str], maximum: int) -> None:
    assert adapter.validate_python("x" * maximum) == "x" * maximum
    assert reason_of(adapter, "x" * (maximum + 1)) == "text_too_long"


def test_titles_are_one_line() -> None:
    for separator in ("\n", "\r", "\u2028", "\u2029"):
        assert reason_of(TITLE, f"one{separator}two") == "control_characters"


def test_the_planner_takes_every_title_the_kernel_takes() -> None:
    """The session planner's ``RunnableTodo.title`` has the proposal's title limit."""
    longest = "t" * TITLE_MAX_CHARS
    assert TodoSpec(todo_id="t", title=longest).title == longest
    assert RunnableTodo(todo_id="t", title=longest).title == longest
    with pytest.raises(ValidationError):
        RunnableTodo(todo_id="t", title=longest + "t")
    with pytest.raises(ValidationError):
        TodoSpec(todo_id="t", title=longest + "t")


@given(st.text(max_size=3 * TITLE_MAX_CHARS))
def test_fit_title_makes_any_recorded_title_fit(value: str) -> None:
    fitted = fit_title(value)
    assert len(fitted) <= TITLE_MAX_CHARS
    assert fitted == value if len(value) <= TITLE_MAX_CHARS else fitted.endswith("…")
    assert RunnableTodo(todo_id="t", title=fitted).title == fitted


def test_records_written_before_the_character_rules_still_decode() -> None:
    """Session events bound lengths only: a stream holding a goal id with a space (which
    the goal kernel once accepted) still folds."""
    event = SessionCreated(
        session_id="8c3d6f8e-52a4-4e0b-9b55-6a6f0e9c1d2a",
        goal_id="my goal\twith a tab",
        workspace="/w",
        host_kind="scripted",
        host_config={},
        generation=1,
        at=datetime(2025, 1, 1, tzinfo=UTC),
    )
    assert SessionCreated.model_validate(event.model_dump()).goal_id == "my goal\twith a tab"
    assert event.snapshots is True  # streams from before the flag have snapshots on


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def test_json_depth_is_bounded_without_recursing() -> None:
    assert json_problem(_nested(JSON_DEPTH_MAX)) is None
    found = json_problem(_nested(JSON_DEPTH_MAX + 1))
    assert found is not None and found[0] == "malformed_json"
    deep = _nested(100_000)  # deeper than any Python stack
    found = json_problem(deep)
    assert found is not None and found[0] == "malformed_json"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[" * 100_000 + "]" * 100_000, "malformed_json"),
        ('{"a": ' * 100_000 + "1" + "}" * 100_000, "malformed_json"),
        (json.dumps(_nested(JSON_DEPTH_MAX + 1)), "malformed_json"),
        ("NaN", "malformed_json"),
        ('{"x": Infinity}', "malformed_json"),
        ("{not json", "malformed_json"),
        ('"\\udce9"', "not_utf8"),
        ('{"\\ud800": 1}', "not_utf8"),
        ("caf\udce9", "not_utf8"),
    ],
)
def test_load_json_refusals(text: str, reason: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        load_json(text, "--value")
    assert info.value.reason == reason
    assert info.value.details["option"] == "--value"


def test_parse_proposal_names_the_refused_field() -> None:
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"kind": "create_goal", "goal_id": "a b", "title": "t"}, "invalid_id", "goal_id"),
        (
            {"kind": "add_todo", "todo": {"todo_id": "t", "title": "x" * (TITLE_MAX_CHARS + 1)}},
            "text_too_long",
            "todo.title",
        ),
        (
            {"kind": "add_todo", "todo": {"todo_id": "t", "title": "t", "depends_on": ["a" * 201]}},
            "text_too_long",
            "todo.depends_on.0",
        ),
        ({"kind": "note", "author": "me", "text": "bell\x07"}, "control_characters", "text"),
        ({"kind": "note", "author": "me", "text": "caf\udce9"}, "not_utf8", "text"),
        (
            {
                "kind": "add_monitor",
                "monitor_id": "m",
                "target": "ci",
                "cadence_seconds": DURATION_MAX_SECONDS + 1,
            },
            "out_of_range",
            "cadence_seconds",
        ),
        (
            {
                "kind": "resolve_gate",
                "gate_id": "g",
                "by": "me",
                "decision": "ok",
                "payload": {"deep": _nested(JSON_DEPTH_MAX)},
            },
            "malformed_json",
            "",
        ),
    ]
    for data, reason, field in cases:
        with pytest.raises(InvalidArgument) as info:
            parse_proposal(data)
        assert (info.value.reason, info.value.details["field"]) == (reason, field), data
        # As JSON text, the same refusal.
        with pytest.raises(InvalidArgument) as info:
            parse_proposal(json.dumps(data))
        assert info.value.reason == reason


def test_structural_errors_keep_their_reason() -> None:
    with pytest.raises(InvalidArgument) as info:
        parse_proposal({"kind": "create_goal", "goal_id": "g"})
    assert info.value.reason == "malformed_proposal"
    assert info.value.details["field"] == "title"


def test_checked_input_turns_a_refused_field_into_invalid_argument() -> None:
    with pytest.raises(InvalidArgument) as info, checked_input():
        TodoSpec(todo_id="t", title="two\nlines")
    assert info.value.reason == "control_characters"
    assert info.value.details["field"] == "title"


def test_empty_values_are_left_to_the_decision_rules() -> None:
    """``empty_text`` stays the rules' reason for empty ids and titles, whichever way a
    proposal was made (see tests/kernel/test_goal.py)."""
    assert TodoSpec(todo_id="", title="").title == ""


def test_a_recorded_id_that_breaks_todays_rules_can_still_be_named() -> None:
    """Ids of new things must hold no whitespace; ids that name recorded things need only
    fit, so a todo recorded with a space in its id can still be claimed and worked."""
    at = datetime(2025, 1, 1, tzinfo=UTC)
    state = fold_goal(
        [
            GoalCreated(goal_id="g", title="t", objective="", criteria=[],
                        agents_requiring_vision=[], at=at),
            TodoAdded(todo_id="my todo", title="old\ttitle", depends_on=[], required_evidence=[],
                      successor_required=False, successor_of=None, at=at),
        ]
    )  # fmt: skip
    claim = ClaimTodo(todo_id="my todo", owner="me", lease_expires_at=at + timedelta(minutes=5))
    state = decide_and_evolve(state, claim, at)[1]
    assert state.todos["my todo"].claim is not None
    with pytest.raises(ValidationError):
        TodoSpec(todo_id="my todo", title="t")  # but no new todo gets such an id

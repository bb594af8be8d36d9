"""How an event is stored (runtime/log/codec.py): compact JSON with its keys sorted,
escaped to ASCII — byte for byte what ``json.dumps`` with those options writes, so
events written before and after any change to how it is produced stay alike (a
checksum covers the stored text; tools and tests read it as it is)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnkeeper.kernel.events import GoalCreated
from turnkeeper.kernel.session.events import SessionCreated
from turnkeeper.runtime.log.codec import EventT, StateT, StreamCodec, _encode_event_json
from turnkeeper.runtime.services.goals import GOAL_CODEC
from turnkeeper.runtime.services.sessions import SESSION_CODEC
from turnkeeper.store.records import EventRecord


def _created(goal_id: str, title: str, at: datetime) -> GoalCreated:
    return GoalCreated(
        goal_id=goal_id,
        title=title,
        objective="",
        criteria=[],
        agents_requiring_vision=["zed", "amy"],
        at=at,
    )


def test_an_event_is_stored_as_compact_sorted_ascii_json() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    event = _created("g-é", "naïve \udcff title", at)
    encoded = GOAL_CODEC.encode_event(event)
    data = event.model_dump(mode="json")
    assert encoded.payload == json.dumps(data, separators=(",", ":"), sort_keys=True)
    assert encoded.payload.isascii() and list(json.loads(encoded.payload)) == sorted(data)
    assert (encoded.type, encoded.schema_version) == ("goal_created", 1)


def test_the_shared_encoder_starts_afresh_each_time() -> None:
    # One encoder serves every call: nothing of one event may leak into the next.
    at = datetime(2026, 1, 2, tzinfo=UTC)
    first = GOAL_CODEC.encode_event(_created("a", "one", at))
    second = GOAL_CODEC.encode_event(_created("b", "two", at))
    assert json.loads(first.payload)["goal_id"] == "a"
    assert json.loads(second.payload)["goal_id"] == "b" and "one" not in second.payload


# Any data model_dump(mode="json") can hand over: nested objects and lists of text
# (non-ASCII, lone surrogates, control characters), integers past 64 bits, floats
# (infinities and NaN included), booleans and null.
_JSON_DATA = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(_JSON_DATA)
def test_the_event_encoder_writes_what_json_dumps_writes(data: object) -> None:
    expected = json.dumps(data, separators=(",", ":"), sort_keys=True)
    assert _encode_event_json(data) == expected


def test_events_of_each_stream_kind_encode_as_json_dumps_would() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    host_config = {
        "zeta": [1.5, -0.0, 1e300, 10**20, None, True],
        "command": ["échō", "日本語", "emoji 🚀", "\u2028", 'quo"te \\ \x01'],
        "alpha": {"b": {"z": 1, "a": 2}, "a": []},
    }
    goal_event = _created("g-日本", "emoji 🚀 and \u2028 line separator", at)
    session_event = SessionCreated(
        session_id=str(uuid.UUID(int=7)),
        goal_id="goal-ü",
        workspace="/tmp/wörk space",
        host_kind="subprocess",
        host_config=host_config,
        generation=1,
        at=at,
    )
    _assert_stored_as_json_dumps_writes(GOAL_CODEC, goal_event)
    _assert_stored_as_json_dumps_writes(SESSION_CODEC, session_event)


def _assert_stored_as_json_dumps_writes(codec: StreamCodec[StateT, EventT], event: EventT) -> None:
    encoded = codec.encode_event(event)
    data = event.model_dump(mode="json")
    assert encoded.payload == json.dumps(data, separators=(",", ":"), sort_keys=True)
    record = EventRecord(
        stream_id="s",
        seq=1,
        type=encoded.type,
        schema_version=encoded.schema_version,
        payload=encoded.payload,
        recorded_at=datetime(2026, 1, 2, tzinfo=UTC),
        checksum="",
    )
    assert codec.decode_event(record) == event


def test_the_encoder_refuses_what_json_dumps_refuses() -> None:
    with pytest.raises(TypeError):
        _encode_event_json({"a": object()})


def test_a_projection_state_is_stored_as_model_dump_json_writes_it() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    state = GOAL_CODEC.evolve_event(None, _created("g-日本", "naïve 🚀 \u2028 title", at))
    encoded = GOAL_CODEC.encode_state(state)
    assert encoded == state.model_dump_json()
    assert GOAL_CODEC.decode_state("goal:g", encoded) == state

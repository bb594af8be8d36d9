"""How an event is stored (runtime/log/codec.py): compact JSON with its keys sorted,
escaped to ASCII — byte for byte what ``json.dumps`` with those options writes, so
events written before and after any change to how it is produced stay alike (a
checksum covers the stored text; tools and tests read it as it is)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from turnkeeper.kernel.events import GoalCreated
from turnkeeper.runtime.services.goals import GOAL_CODEC


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

"""Every event version ever written still reads as the current one.

``tests/fixtures/events/*.jsonl`` holds samples of every (stream kind, event type,
schema version) the project has written: ``generated.jsonl`` the current shapes (made
by ``make_fixture.py``), ``handwritten.jsonl`` the older ones. Each sample is stored
in a real SQLite event store and read back through its stream's codec, the way every
reader decodes events: the upcasters of turnkeeper/kernel/upcast.py, then the model.
A new event type without a sample, or an upcaster with no sample of the version it
reads, fails here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from pydantic import BaseModel, ValidationError

from tests.kernel_session.helpers import accept, new_session, start_host
from turnkeeper.errors import DataLoss
from turnkeeper.json_types import JsonDict, json_object
from turnkeeper.kernel import upcast
from turnkeeper.kernel.session import SESSION_EVENT_SCHEMA_VERSION
from turnkeeper.runtime.log.codec import StreamCodec
from turnkeeper.runtime.services.access import ACCESS_CODEC
from turnkeeper.runtime.services.extension_settings import EXTENSIONS_CODEC
from turnkeeper.runtime.services.goals import GOAL_CODEC
from turnkeeper.runtime.services.sessions import SESSION_CODEC
from turnkeeper.store import EventStore, open_store
from turnkeeper.store.records import EventRecord, NewEvent

FIXTURES = Path(__file__).parents[1] / "fixtures" / "events"


StateT = TypeVar("StateT", bound=BaseModel)
EventT = TypeVar("EventT", bound=BaseModel)


@dataclass(frozen=True)
class Reader:
    """One stream kind's codec as this test uses it, whatever its event type: the
    versions it reads, and an event read from a record and encoded again."""

    supported_versions: Mapping[str, frozenset[int]]
    read: Callable[[EventRecord], tuple[BaseModel, NewEvent]]


def _reader(codec: StreamCodec[StateT, EventT]) -> Reader:
    def read(record: EventRecord) -> tuple[BaseModel, NewEvent]:
        event = codec.decode_event(record)
        return event, codec.encode_event(event)

    return Reader(codec.supported_versions, read)


CODECS: dict[str, Reader] = {
    GOAL_CODEC.kind: _reader(GOAL_CODEC),
    SESSION_CODEC.kind: _reader(SESSION_CODEC),
    ACCESS_CODEC.kind: _reader(ACCESS_CODEC),
    EXTENSIONS_CODEC.kind: _reader(EXTENSIONS_CODEC),
}


@dataclass(frozen=True)
class Sample:
    where: str  # file:line, for the failure message
    kind: str
    type: str
    schema_version: int
    payload: JsonDict

    @property
    def stored(self) -> str:
        return json.dumps(self.payload, separators=(",", ":"), sort_keys=True)


def _samples() -> Iterator[Sample]:
    for path in sorted(FIXTURES.glob("*.jsonl")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            data = json_object(line)
            kind, event_type = data["kind"], data["type"]
            version, payload = data["schema_version"], data["payload"]
            assert isinstance(kind, str) and isinstance(event_type, str)
            assert isinstance(version, int) and isinstance(payload, dict)
            yield Sample(f"{path.name}:{number}", kind, event_type, version, payload)


SAMPLES = list(_samples())


def _current(kind: str, event_type: str) -> int:
    return max(CODECS[kind].supported_versions[event_type])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EventStore]:
    opened = open_store(str(tmp_path / "store.db"))
    yield opened
    opened.close()


def _stored(store: EventStore, stream_id: str, event: NewEvent) -> EventRecord:
    """``event`` appended to a stream of its own and read back as the store gives it."""
    store.append(stream_id, "fixture", 0, [event], "{}", 1)
    [record] = store.read_stream(stream_id)
    return record


def _as_written(sample: Sample) -> NewEvent:
    return NewEvent(type=sample.type, schema_version=sample.schema_version, payload=sample.stored)


def test_the_fixture_is_there() -> None:
    # Both files, and enough lines that a glob gone wrong cannot pass as an empty set.
    assert {Path(s.where.split(":")[0]).name for s in SAMPLES} == {
        "generated.jsonl",
        "handwritten.jsonl",
    }
    assert len(SAMPLES) > 80


def test_each_sample_says_its_type_and_version_as_its_payload_does() -> None:
    for sample in SAMPLES:
        assert sample.payload["type"] == sample.type, sample.where
        assert sample.payload["schema_version"] == sample.schema_version, sample.where


def test_every_sample_decodes_as_the_current_version(store: EventStore) -> None:
    for number, sample in enumerate(SAMPLES):
        reader = CODECS[sample.kind]
        event, again = reader.read(_stored(store, f"fixture:{number}", _as_written(sample)))
        current = _current(sample.kind, sample.type)
        assert (again.type, again.schema_version) == (sample.type, current), sample.where
        # What it decodes to is a current event: written again, it is stored at the
        # current version and reads back the same, with no upcaster on the way.
        assert not upcast.needs_upcast(again.type, again.schema_version), sample.where
        reread, _ = reader.read(_stored(store, f"again:{number}", again))
        assert reread == event, sample.where


def test_every_event_type_of_every_stream_has_a_current_sample() -> None:
    have = {(s.kind, s.type, s.schema_version) for s in SAMPLES}
    wanted = {
        (kind, event_type, max(versions))
        for kind, codec in CODECS.items()
        for event_type, versions in codec.supported_versions.items()
    }
    missing = sorted(wanted - have)
    assert missing == [], (
        f"no fixture sample of {missing}: run python -m tests.fixtures.events.make_fixture"
    )


def test_every_upcaster_has_a_sample_of_the_version_it_reads() -> None:
    have = {(s.type, s.schema_version) for s in SAMPLES}
    steps = set(upcast.registered())
    assert len(steps) >= len(upcast.SESSION_TYPES_AT_V1)
    missing = sorted(steps - have)
    assert missing == [], f"write a sample of each old shape in handwritten.jsonl: {missing}"


def test_every_sample_is_of_a_type_and_version_the_code_reads() -> None:
    for sample in SAMPLES:
        versions = CODECS[sample.kind].supported_versions.get(sample.type)
        assert versions is not None, f"{sample.where}: no stream reads {sample.type!r}"
        readable = versions | {v for (t, v) in upcast.registered() if t == sample.type}
        assert sample.schema_version in readable, sample.where


def test_a_version_1_process_identity_reads_as_its_parts(store: EventStore) -> None:
    """The three places a version 1 session event holds a host process: each reads as
    the boot id and start time its fingerprint names."""
    checked = 0
    for number, sample in enumerate(SAMPLES):
        if sample.kind != "session" or sample.schema_version != 1:
            continue
        event = SESSION_CODEC.decode_event(_stored(store, f"v1:{number}", _as_written(sample)))
        written = json.dumps(sample.payload)
        read = event.model_dump(mode="json")
        for process in _processes(sample.type, sample.payload):
            fingerprint = process["start_fingerprint"]
            assert isinstance(fingerprint, str)
            boot_id, _, ticks = fingerprint.rpartition(":")
            expected = {"pid": process["pid"], "marker": process["marker"]}
            expected |= {"boot_id": boot_id, "start_time": int(ticks)}
            assert expected in _processes(sample.type, read), sample.where
            checked += 1
        assert "start_fingerprint" not in json.dumps(read), written
    assert checked >= 3  # host_started, a loss proof, a recovery report's probe


def _processes(event_type: str, payload: JsonDict) -> list[JsonDict]:
    """Every host process identity ``payload`` holds, as written."""
    found: list[object] = []
    if event_type == "turn.host_started":
        found.append(payload["process"])
    elif event_type == "turn.lost" and isinstance(payload["proof"], dict):
        found.append(payload["proof"].get("process"))
    elif event_type == "session.recovery_reported" and isinstance(payload["report"], dict):
        probed = payload["report"]["probed"]
        assert isinstance(probed, dict) and isinstance(probed["host_processes"], list)
        found += [p["process"] for p in probed["host_processes"] if isinstance(p, dict)]
    return [p for p in found if isinstance(p, dict)]


@pytest.mark.parametrize("fingerprint", ["no-colon", "boot:x", ":12"])
def test_a_malformed_version_1_fingerprint_is_data_loss(
    store: EventStore, fingerprint: str
) -> None:
    [sample] = [s for s in SAMPLES if (s.type, s.schema_version) == ("turn.host_started", 1)]
    assert isinstance(sample.payload["process"], dict)
    broken = {**sample.payload["process"], "start_fingerprint": fingerprint}
    damaged = Sample("test", "session", sample.type, 1, {**sample.payload, "process": broken})
    with pytest.raises(DataLoss) as caught:
        SESSION_CODEC.decode_event(_stored(store, "damaged", _as_written(damaged)))
    assert caught.value.reason == "undecodable_event"


def test_an_upcaster_registered_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):
        upcast.upcaster("turn.host_started", from_version=1)(lambda data: data)
    assert upcast.registered()[("turn.host_started", 1)] is not None


def test_the_session_upcasters_reach_the_current_version() -> None:
    assert SESSION_EVENT_SCHEMA_VERSION == 2
    for event_type in upcast.SESSION_TYPES_AT_V1:
        assert _current("session", event_type) == SESSION_EVENT_SCHEMA_VERSION
        assert upcast.needs_upcast(event_type, 1)
        assert not upcast.needs_upcast(event_type, 2)


def test_a_session_projection_written_by_version_1_code_decodes() -> None:
    """A projection is written beside its events: the previous release left one
    holding a version 1 identity for the turn in flight. It reads as the state the
    same stream folds to now."""
    h = new_session()
    accept(h, "t1")
    start_host(h, "t1")
    state = json_object(SESSION_CODEC.encode_state(h.s))
    in_flight = state["in_flight"]
    assert isinstance(in_flight, dict) and isinstance(in_flight["process"], dict)
    process = dict(in_flight["process"])
    fingerprint = f"{process.pop('boot_id')}:{process.pop('start_time')}"
    in_flight["process"] = {**process, "start_fingerprint": fingerprint}
    old_text = json.dumps(state)
    assert SESSION_CODEC.decode_state("session:old", old_text) == h.s
    # Without the reader it would not decode: the current model refuses the old shape.
    with pytest.raises(ValidationError, match="start_fingerprint"):
        SESSION_CODEC.state_type.model_validate_json(old_text)

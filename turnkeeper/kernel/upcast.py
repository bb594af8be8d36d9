"""Upcasters: how an event stored at an older schema version is read as the current one.

When you change an event's shape, bump its version and add an upcaster here.

Every stored event carries its ``type`` and ``schema_version`` (the store keeps both
beside the payload, and the payload repeats them). An upcaster is a pure function
from the JSON of one (type, version) to the JSON of that type at version + 1,
registered with :func:`upcaster`. On read, :func:`upcast_event` applies the steps in
order until no step is registered for the version reached, and only then is the
result validated into the event's model: the models describe the current shape
only, and the history of every shape lives here, one step per version bump. The
store's codec (runtime/log/codec.py) calls :func:`upcast_payload` for a record whose
(type, version) has a step, so a current event pays nothing for this.

Adding an upcaster also means adding a sample of the old shape to
``tests/fixtures/events/`` (a line written by hand, as the old code wrote it): the
replay test there decodes every sample of every version through this module.

A projection is a cache of its stream's fold. When a state model changes shape, its
codec's ``projection_schema_version`` is bumped and ``repair`` refolds the older
projections. One change predates that rule (session events version 2 left session
projections at version 1): :func:`legacy_projection` reads those, and is the only
place that may ever hold such a reader.

Like the rest of the kernel this module is pure: no clock, no I/O, JSON in, JSON out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Final

from turnkeeper.json_types import JsonDict, JsonValue, json_object

Upcaster = Callable[[JsonDict], JsonDict]

_STEPS: dict[tuple[str, int], Upcaster] = {}
_PROJECTION_READERS: dict[tuple[str, int], Upcaster] = {}


def upcaster(*event_types: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register the decorated function as the step from ``from_version`` to
    ``from_version + 1`` of each of ``event_types``. One step per (type, version):
    a second registration is a programming error, refused at import."""

    def register(step: Upcaster) -> Upcaster:
        for event_type in event_types:
            key = (event_type, from_version)
            if key in _STEPS:
                raise ValueError(f"an upcaster for {key} is already registered")
            _STEPS[key] = step
        return step

    return register


def registered() -> Mapping[tuple[str, int], Upcaster]:
    """Every (event type, version) with a step to the next version."""
    return dict(_STEPS)


def needs_upcast(event_type: str, schema_version: int) -> bool:
    """Whether an event of this type and version is older than the current shape."""
    return (event_type, schema_version) in _STEPS


def upcast_event(data: JsonDict) -> JsonDict:
    """``data`` (one event's JSON, as stored) brought to its type's current version.

    ValueError when a step cannot read what it was given, or does not produce the
    next version (a step that forgets to bump ``schema_version`` would loop)."""
    event_type, version = data.get("type"), data.get("schema_version")
    if not isinstance(event_type, str) or not isinstance(version, int):
        raise ValueError("an event names its type and its integer schema_version")
    while (step := _STEPS.get((event_type, version))) is not None:
        data = step(data)
        if data.get("schema_version") != version + 1 or data.get("type") != event_type:
            raise ValueError(f"the upcaster of {event_type!r} v{version} must yield v{version + 1}")
        version += 1
    return data


def upcast_payload(payload: str | bytes) -> str:
    """A stored payload at its current version, as JSON text again (so the model
    validates it as JSON, exactly as it does a current payload)."""
    return json.dumps(upcast_event(json_object(payload)), separators=(",", ":"), sort_keys=True)


def upcast_event_json(text: str | bytes) -> str | bytes:
    """``text`` itself when its event is current; else the upcast JSON."""
    data = json_object(text)
    event_type, version = data.get("type"), data.get("schema_version")
    if not isinstance(event_type, str) or not isinstance(version, int):
        return text  # the model says what is wrong with it
    if not needs_upcast(event_type, version):
        return text
    return json.dumps(upcast_event(data), separators=(",", ":"), sort_keys=True)


def legacy_projection(kind: str, projection_version: int, state: JsonDict) -> JsonDict | None:
    """A projection written before its state changed shape in place, in the current
    shape; None when no reader is registered for it (it is then undecodable)."""
    reader = _PROJECTION_READERS.get((kind, projection_version))
    return None if reader is None else reader(state)


# --- the steps -----------------------------------------------------------------------------

# Every type the session stream had when its events were at version 1 (fixed: a type
# added later was never written at 1, and must not gain a step from it).
SESSION_TYPES_AT_V1: Final = (
    *("session.created", "session.lease_acquired", "session.lease_renewed"),
    *("session.lease_released", "session.status_changed", "session.diagnostic"),
    *("session.recovery_reported", "turn.accepted", "turn.host_started", "turn.host_events"),
    *("turn.receipt_recorded", "turn.written_back", "turn.effect_intended"),
    *("turn.effect_resolved", "turn.effect_rejected", "turn.effects_recorded"),
    *("turn.completed", "turn.failed", "turn.lost", "turn.abandoned"),
    *("turn.recovery_resolved", "turn.unbound_restored"),
    *("operation.started", "operation.joined", "operation.step_recorded"),
    "operation.finished",
)


def _identity_v2(identity: JsonValue) -> JsonValue:
    """A host process as version 1 journaled it, ``{pid, start_fingerprint, marker}``
    with ``start_fingerprint = "<boot_id>:<start_time>"``, as version 2 records it:
    ``{pid, start_time, boot_id, marker}``."""
    if not isinstance(identity, dict) or "start_fingerprint" not in identity:
        return identity  # not the version 1 shape: the model says what is wrong with it
    fingerprint = identity["start_fingerprint"]
    boot_id, _, start_time = str(fingerprint).rpartition(":")
    if not start_time.isdigit() or not boot_id:
        raise ValueError(f"start_fingerprint {fingerprint!r} is not <boot_id>:<ticks>")
    rest = {k: v for k, v in identity.items() if k != "start_fingerprint"}
    return {**rest, "boot_id": boot_id, "start_time": int(start_time)}


def _probes_v2(report: JsonValue) -> JsonValue:
    """A recovery report whose probed host processes are version 2 identities."""
    if not isinstance(report, dict):
        return report
    probed = report.get("probed")
    probes = probed.get("host_processes") if isinstance(probed, dict) else None
    if not isinstance(probed, dict) or not isinstance(probes, list):
        return report
    moved: list[JsonValue] = [
        {**p, "process": _identity_v2(p.get("process"))} if isinstance(p, dict) else p
        for p in probes
    ]
    return {**report, "probed": {**probed, "host_processes": moved}}


@upcaster(*SESSION_TYPES_AT_V1, from_version=1)
def _session_v1_to_v2(data: JsonDict) -> JsonDict:
    # Version 2 changed one thing: a host process identity (the three places an event
    # holds one are below). Every session event moved to 2 at once, so code that
    # reads only 1 refuses a newer stream by its version instead of failing to decode.
    out: JsonDict = {**data, "schema_version": 2}
    if data.get("type") == "turn.host_started":
        out["process"] = _identity_v2(data.get("process"))
    elif data.get("type") == "turn.lost":
        proof = data.get("proof")
        if isinstance(proof, dict) and proof.get("process") is not None:
            out["proof"] = {**proof, "process": _identity_v2(proof["process"])}
    elif data.get("type") == "session.recovery_reported":
        out["report"] = _probes_v2(data.get("report"))
    return out


def _session_projection_v1(state: JsonDict) -> JsonDict:
    # A session projection written by version 1 code holds version 1 identities where
    # the state keeps one: the turn in flight, and the latest recovery report.
    out = dict(state)
    in_flight = state.get("in_flight")
    if isinstance(in_flight, dict) and in_flight.get("process") is not None:
        out["in_flight"] = {**in_flight, "process": _identity_v2(in_flight["process"])}
    if state.get("latest_recovery_report") is not None:
        out["latest_recovery_report"] = _probes_v2(state["latest_recovery_report"])
    return out


_PROJECTION_READERS[("session", 1)] = _session_projection_v1

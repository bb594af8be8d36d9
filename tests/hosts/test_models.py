"""The host models and the in-memory event log, without processes."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

from turnkeeper.host_reports import ProcessIdentity
from turnkeeper.hosts import HostErrorKind, HostOutcome, HostStatus, TurnRequest
from turnkeeper.hosts._events import EventLog, ProtocolError, dig, parse_jsonl_line


def test_outcome_requires_error_kind_iff_failed() -> None:
    with pytest.raises(ValidationError):
        HostOutcome(status=HostStatus.FAILED)
    with pytest.raises(ValidationError):
        HostOutcome(status=HostStatus.SUCCEEDED, error_kind=HostErrorKind.SIGNAL)
    ok = HostOutcome(status=HostStatus.SUCCEEDED, result={"a": 1})
    assert HostOutcome.model_validate_json(ok.model_dump_json()) == ok


def test_turn_id_must_be_a_usable_marker() -> None:
    base = {
        "session_id": "s",
        "generation": 0,
        "attempt": 1,
        "kind": "start",
        "instructions": "",
        "workspace": Path("/tmp"),
    }
    for bad in ["", "a b", "a=b", "a\x00"]:
        with pytest.raises(ValidationError):
            TurnRequest(turn_id=bad, **base)
    assert TurnRequest(turn_id="t-1", **base).kind == "start"


def test_identity_fingerprint() -> None:
    ident = ProcessIdentity(pid=10, start_time=99, boot_id="b", marker="t")
    assert ident.fingerprint == "b:99"


def test_parse_jsonl_line_shapes() -> None:
    assert parse_jsonl_line(b'{"kind": "message", "data": {"a": 1}}') == ("message", {"a": 1})
    assert parse_jsonl_line(b'{"type": "x", "v": 2}') == ("x", {"type": "x", "v": 2})
    assert parse_jsonl_line(b"   ") is None
    too_long = b'{"kind": "' + b"k" * 201 + b'", "data": {}}'
    for bad in [b"{", b"[1]", b'{"kind": 1}', b"\xff\xfe", too_long, b'{"type": ""}']:
        with pytest.raises(ProtocolError):
            parse_jsonl_line(bad)
    assert dig({"a": {"b": "c"}}, "a.b") == "c"
    assert dig({"a": 1}, "a.b") is None


def test_event_log_follow_and_reattach() -> None:
    log = EventLog()
    log.append("a", {})
    assert [e.seq for e in log.iter(0, follow=False)] == [1]
    got: list[int] = []
    reader = threading.Thread(target=lambda: got.extend(e.seq for e in log.iter(1)))
    reader.start()
    log.append("b", {})
    log.append("c", {})
    log.close()
    reader.join(5)
    assert got == [2, 3]
    assert [e.seq for e in log.iter(2)] == [3]
    with pytest.raises(RuntimeError):
        log.append("d", {})

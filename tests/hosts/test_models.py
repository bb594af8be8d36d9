"""The host models and the in-memory event log, without processes."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

from turnkeeper.errors import InvalidArgument
from turnkeeper.host_reports import ProcessIdentity
from turnkeeper.hosts import HostErrorKind, HostOutcome, HostStatus, TurnRequest
from turnkeeper.hosts._events import EventLog, ProtocolError, dig, parse_jsonl_line
from turnkeeper.hosts.subprocess_config import SubprocessHostConfig, validated_config
from turnkeeper.hosts.subprocess_host import SubprocessHost


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


def test_a_host_config_is_validated_again_whenever_its_content_differs() -> None:
    # Validated configs are remembered by content with every value's type
    # (hosts/subprocess_config.py): a changed config never gets a stale model.
    model = SubprocessHostConfig
    first = validated_config(model, {"command": ["a"], "env": {"K": "1"}})
    assert validated_config(model, {"command": ["a"], "env": {"K": "1"}}) is first
    assert validated_config(model, {"command": ["b"], "env": {"K": "1"}}).command == ["b"]
    assert validated_config(model, {"command": ["a"], "env": {"K": "2"}}).env == {"K": "2"}
    with pytest.raises(InvalidArgument):  # equal to nothing remembered: rejected again
        validated_config(model, {"command": ["a"], "env": {"K": 1}})
    with pytest.raises(InvalidArgument):
        validated_config(model, {"command": ["a"], "env": {"K": 1}})
    one = validated_config(model, {"command": ["a"], "max_line_bytes": 1})
    # True == 1 in Python, but they are different configs.
    assert validated_config(model, {"command": ["a"], "max_line_bytes": True}) is not one
    assert validated_config(model, {"command": ["a"], "drain_seconds": -0.0}) is not (
        validated_config(model, {"command": ["a"], "drain_seconds": 0.0})
    )
    # Not plain JSON (a tuple): validated every time.
    odd = {"command": ("a",)}
    assert validated_config(model, odd) is not validated_config(model, odd)
    host = SubprocessHost({"command": ["c"]})
    assert SubprocessHost({"command": ["c"]})._validated is host._validated
    assert SubprocessHost({"command": ["d"]})._validated.command == ["d"]

"""The python host runs ``module:function`` in a child process."""

from __future__ import annotations

from tests.hosts.conftest import MakeRequest
from turnkeeper.hosts import HostErrorKind, load_host


def test_callable_emits_events_and_returns_a_result(make_request: MakeRequest) -> None:
    host = load_host("python", {"callable": "tests.hosts.pyhost_targets:works"})
    r = host.start(make_request(instructions="docs"))
    outcome = r.wait(20)
    assert outcome.succeeded, outcome
    assert [(e.seq, e.kind) for e in r.events(0)] == [
        (1, "message"),
        (2, "session.bound"),
        (3, "result"),
    ]
    assert outcome.result == {"summary": "ok", "attempt": 1}
    assert outcome.host_session_handle == "py-sess-1"
    # User prints went to stderr, not into the jsonl channel.
    assert "stray print" in outcome.stderr_tail
    assert "child's output" in outcome.stderr_tail


def test_exception_is_a_failed_outcome(make_request: MakeRequest) -> None:
    host = load_host("python", {"callable": "tests.hosts.pyhost_targets:raises"})
    outcome = host.start(make_request()).wait(20)
    assert outcome.error_kind is HostErrorKind.EXIT_CODE
    assert outcome.exit_code == 1
    assert "RuntimeError: agent blew up" in outcome.message
    assert "Traceback" in outcome.stderr_tail


def test_bad_callable_and_bad_result(make_request: MakeRequest) -> None:
    missing = load_host("python", {"callable": "tests.hosts.pyhost_targets:nope"})
    outcome = missing.start(make_request()).wait(20)
    assert outcome.error_kind is HostErrorKind.SPAWN
    assert "cannot load" in outcome.message
    wrong = load_host("python", {"callable": "tests.hosts.pyhost_targets:returns_list"})
    assert wrong.start(make_request()).wait(20).error_kind is HostErrorKind.PROTOCOL

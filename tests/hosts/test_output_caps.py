"""A turn's output is bounded in the host: the event log keeps at most the caps of
``TurnLimits`` (plus the events that carry meaning), counts and digests the rest,
and the subprocess host reads any amount of output in bounded memory."""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

from tests.hosts.conftest import MakeRequest
from turnkeeper.hosts import HostErrorKind, HostStatus
from turnkeeper.hosts._events import EventLog, Line, LineBuffer
from turnkeeper.hosts.base import TurnLimits
from turnkeeper.hosts.output_cap import OVERFLOW_EVENTS, TRUNCATED_KIND, encode_event
from turnkeeper.hosts.subprocess_host import SubprocessHost
from turnkeeper.json_types import JsonDict


def _digest(events: list[tuple[str, dict[str, Any]]]) -> str:
    """sha256 of events as compact JSON lines, computed here without the product."""
    digest = hashlib.sha256()
    for kind, data in events:
        line = json.dumps({"kind": kind, "data": data}, separators=(",", ":"), ensure_ascii=False)
        digest.update(line.encode() + b"\n")
    return digest.hexdigest()


def _size(kind: str, data: dict[str, Any]) -> int:
    encoded = json.dumps({"kind": kind, "data": data}, separators=(",", ":"), ensure_ascii=False)
    return len(encoded.encode())


def test_event_log_keeps_the_first_max_events_and_digests_the_rest() -> None:
    log = EventLog(TurnLimits(max_events=5))
    appended: list[tuple[str, JsonDict]] = [
        ("note", {"i": i, "text": f"line {i}"}) for i in range(12)
    ]
    kept = [log.append(kind, data) for kind, data in appended]
    assert [e.seq if e else None for e in kept] == [1, 2, 3, 4, 5] + [None] * 7
    assert log.dropped_events == 7
    log.close()

    events = list(log.iter(0, follow=False))
    assert [e.seq for e in events] == [1, 2, 3, 4, 5, 6]  # contiguous, truncation last
    assert [e.data["i"] for e in events[:5]] == [0, 1, 2, 3, 4]
    truncated = events[-1]
    assert truncated.kind == TRUNCATED_KIND
    dropped = appended[5:]
    assert truncated.data == {
        "dropped_events": 7,
        "dropped_bytes": sum(_size(k, d) for k, d in dropped),
        "sha256": _digest(dropped),
        "limit": {"reached": "max_events", "max_events": 5, "max_output_bytes": 4 * 1024 * 1024},
    }
    # A reader reattaching within what is stored sees exactly the rest.
    assert [e.seq for e in log.iter(after_seq=3, follow=False)] == [4, 5, 6]


def test_the_byte_cap_is_sticky_so_the_journal_is_a_prefix_of_the_output() -> None:
    first: tuple[str, JsonDict] = ("output", {"text": "a" * 40})
    big: tuple[str, JsonDict] = ("output", {"text": "b" * 100})
    # There is room for ``small``, but it comes after the cut.
    small: tuple[str, JsonDict] = ("output", {"text": ""})
    log = EventLog(TurnLimits(max_output_bytes=3 * _size(*first) + _size(*small)))
    for _ in range(3):
        assert log.append(*first) is not None
    assert log.append(*big) is None
    assert log.append(*small) is None
    log.close()
    events = list(log.iter(0, follow=False))
    assert len(events) == 4
    assert events[-1].data["dropped_events"] == 2
    assert events[-1].data["dropped_bytes"] == _size(*big) + _size(*small)
    assert events[-1].data["sha256"] == _digest([big, small])
    limit = events[-1].data["limit"]
    assert isinstance(limit, dict)
    assert limit["reached"] == "max_output_bytes"


def test_nothing_dropped_means_no_truncation_event() -> None:
    log = EventLog(TurnLimits(max_events=3))
    for i in range(3):
        log.append("note", {"i": i})
    log.close()
    assert [e.kind for e in log.iter(0, follow=False)] == ["note"] * 3


def test_handle_result_and_fatal_error_survive_the_cap_but_only_within_an_allowance() -> None:
    log = EventLog(TurnLimits(max_events=2))
    log.append("note", {"i": 0})
    log.append("note", {"i": 1})
    assert log.append("note", {"i": 2}) is None
    assert log.append("session.bound", {"handle": "h-1"}) is not None
    assert log.append("error", {"message": "a warning"}) is None  # not fatal: ordinary
    assert log.append("error", {"fatal": True, "message": "boom"}) is not None
    assert log.append("result", {"summary": "done"}) is not None
    # A host printing nothing but results cannot bypass the cap.
    kept = sum(log.append("result", {"n": n}) is not None for n in range(1000))
    log.close()
    events = list(log.iter(0, follow=False))
    overflow = 3 + kept
    assert overflow == OVERFLOW_EVENTS - 1  # one slot is the truncation event's
    assert len(events) == 2 + overflow + 1
    assert [e.kind for e in events[2:5]] == ["session.bound", "error", "result"]
    assert events[-1].kind == TRUNCATED_KIND
    assert events[-1].data["dropped_events"] == 2 + (1000 - kept)


def test_meaningful_events_beyond_the_cap_are_bounded_in_bytes_too() -> None:
    limits = TurnLimits(max_events=1, max_result_bytes=10_000)
    log = EventLog(limits)
    log.append("note", {})
    big_result: JsonDict = {"text": "r" * 9_000}
    kept = sum(log.append("result", big_result) is not None for _ in range(20))
    log.close()
    # About one result's worth (plus 64 KiB of slack) beyond the cap, not twenty.
    assert kept == (10_000 + 64 * 1024 - 1024) // _size("result", big_result)
    assert kept < 20


def test_appending_after_close_is_refused() -> None:
    log = EventLog()
    log.close()
    try:
        log.append("note", {})
    except RuntimeError:
        return
    raise AssertionError("append after close was accepted")


def test_line_buffer_hands_out_overlong_lines_in_bounded_pieces() -> None:
    buffer = LineBuffer(max_line_bytes=1000)
    stream = b"short\n" + b"x" * 5000 + b"\nnext\n" + b"tail"
    pieces: list[Line] = []
    for start in range(0, len(stream), 300):  # in chunks, as a pipe delivers them
        pieces.extend(buffer.feed(stream[start : start + 300]))
    last = buffer.flush()
    assert last is not None
    pieces.append(last)
    assert pieces[0].data == b"short" and not pieces[0].split
    long_pieces = [p for p in pieces if p.split]
    assert b"".join(p.data for p in long_pieces) == b"x" * 5000
    assert all(len(p.data) <= 1000 + 300 for p in long_pieces)  # never more than a chunk over
    assert [p.continued for p in long_pieces] == [False] + [True] * (len(long_pieces) - 1)
    assert [p.data for p in pieces if not p.split] == [b"short", b"next", b"tail"]


def _printer(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_subprocess_text_output_over_the_cap_is_counted_and_digested(
    make_request: MakeRequest,
) -> None:
    lines = [f"line {i} " + "y" * (i % 50) for i in range(3000)]
    code = "import sys\nfor i in range(3000):\n    print(f'line {i} ' + 'y' * (i % 50))\n"
    limits = TurnLimits(max_events=100)
    run = SubprocessHost({"command": _printer(code)}).start(make_request(limits=limits))
    outcome = run.wait(30)
    assert outcome.status is HostStatus.SUCCEEDED  # the turn itself is unaffected
    events = list(run.events(0, follow=False))
    assert outcome.last_seq == len(events) == 101
    assert [e.data["text"] for e in events[:100]] == lines[:100]
    dropped = [("output", {"text": text}) for text in lines[100:]]
    assert events[-1].kind == TRUNCATED_KIND
    assert events[-1].data["dropped_events"] == 2900
    assert events[-1].data["dropped_bytes"] == sum(_size(k, d) for k, d in dropped)
    assert events[-1].data["sha256"] == _digest(dropped)


def test_subprocess_handle_and_result_beyond_the_cap_reach_log_and_outcome(
    make_request: MakeRequest,
) -> None:
    code = (
        "import json\n"
        "for i in range(500):\n"
        "    print(json.dumps({'kind': 'note', 'data': {'i': i}}))\n"
        "print(json.dumps({'kind': 'session.bound', 'data': {'handle': 'agent-7'}}))\n"
        "print(json.dumps({'kind': 'result', 'data': {'summary': 'all done'}}))\n"
    )
    config = {"command": _printer(code), "event_format": "jsonl"}
    run = SubprocessHost(config).start(make_request(limits=TurnLimits(max_events=10)))
    outcome = run.wait(30)
    assert outcome.succeeded
    assert outcome.host_session_handle == "agent-7"
    assert outcome.result == {"summary": "all done"}
    kinds = [e.kind for e in run.events(0, follow=False)]
    assert kinds == ["note"] * 10 + ["session.bound", "result", TRUNCATED_KIND]


def test_subprocess_result_remembered_even_when_the_allowance_is_spent(
    make_request: MakeRequest,
) -> None:
    """The last result wins, journaled or not: the outcome never depends on the caps."""
    code = (
        "import json\n"
        "for i in range(200):\n"
        "    print(json.dumps({'kind': 'result', 'data': {'n': i}}))\n"
    )
    config = {"command": _printer(code), "event_format": "jsonl"}
    run = SubprocessHost(config).start(make_request(limits=TurnLimits(max_events=5)))
    outcome = run.wait(30)
    assert outcome.result == {"n": 199}
    events = list(run.events(0, follow=False))
    assert len(events) == 5 + OVERFLOW_EVENTS
    assert events[-1].data["dropped_events"] == 200 - 5 - (OVERFLOW_EVENTS - 1)


def test_subprocess_result_over_the_limit_fails_the_turn_as_protocol(
    make_request: MakeRequest,
) -> None:
    code = "import json\nprint(json.dumps({'kind': 'result', 'data': {'blob': 'z' * 5000}}))\n"
    config = {"command": _printer(code), "event_format": "jsonl"}
    run = SubprocessHost(config).start(make_request(limits=TurnLimits(max_result_bytes=4096)))
    outcome = run.wait(30)
    assert outcome.status is HostStatus.FAILED
    assert outcome.error_kind is HostErrorKind.PROTOCOL
    assert "max_result_bytes" in outcome.message and "4096" in outcome.message
    assert outcome.result == {}


def test_subprocess_result_at_the_limit_is_accepted(make_request: MakeRequest) -> None:
    result = {"blob": "z" * 100}
    limit = len(json.dumps(result, separators=(",", ":")))
    code = f"import json\nprint(json.dumps({{'kind': 'result', 'data': {result!r}}}))\n"
    config = {"command": _printer(code), "event_format": "jsonl"}
    run = SubprocessHost(config).start(make_request(limits=TurnLimits(max_result_bytes=limit)))
    outcome = run.wait(30)
    assert outcome.succeeded and outcome.result == result


def test_an_overlong_jsonl_line_is_one_protocol_error_and_reading_goes_on(
    make_request: MakeRequest,
) -> None:
    code = (
        "import json, sys\n"
        'sys.stdout.write(\'{"kind": "note", "data": {"x": "\' + \'q\' * 300000 + \'"}}\\n\')\n'
        "print(json.dumps({'kind': 'result', 'data': {'summary': 'after'}}))\n"
    )
    config = {
        "command": _printer(code),
        "event_format": "jsonl",
        "max_line_bytes": 100_000,
        "tolerate_malformed": True,
    }
    run = SubprocessHost(config).start(make_request())
    outcome = run.wait(30)
    assert outcome.succeeded
    assert outcome.result == {"summary": "after"}
    events = list(run.events(0, follow=False))
    assert [e.kind for e in events] == ["error", "result"]
    assert "longer than 100000 bytes" in str(events[0].data["message"])
    assert len(str(events[0].data["line"])) == 500  # an excerpt, not the line


def test_malformed_lines_are_counted_not_kept(make_request: MakeRequest) -> None:
    code = "for i in range(5000):\n    print('not json', i)\n"
    config = {"command": _printer(code), "event_format": "jsonl"}
    run = SubprocessHost(config).start(make_request(limits=TurnLimits(max_events=50)))
    outcome = run.wait(30)
    assert outcome.error_kind is HostErrorKind.PROTOCOL
    assert outcome.message.startswith("5000 malformed output line(s); first: not JSON")
    assert len(list(run.events(0, follow=False))) == 51


def test_the_stderr_tail_stays_capped(make_request: MakeRequest) -> None:
    code = "import sys\nfor i in range(20000):\n    sys.stderr.write('e' * 499 + '\\n')\n"
    config = {"command": _printer(code), "stderr_tail_bytes": 4096}
    run = SubprocessHost(config).start(make_request())
    outcome = run.wait(30)
    assert outcome.succeeded
    assert len(outcome.stderr_tail) == 4096  # of 10 MB written
    assert outcome.stderr_tail.endswith("e" * 499 + "\n")


def test_encode_event_is_the_compact_json_of_kind_and_data() -> None:
    data = {"text": "é", "n": [1, 2]}
    assert encode_event("note", data) == '{"kind":"note","data":{"text":"é","n":[1,2]}}'.encode()

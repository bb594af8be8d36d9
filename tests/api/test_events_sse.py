"""Live events over SSE from a real uvicorn, while a real turn runs.

A control plane drives the session in a thread of this process (the scripted host
is a real subprocess that prints a message every tenth of a second). A client with
a read-only share connects while the turn runs, takes a few host events, hangs up,
reconnects with ``Last-Event-ID`` and reads on until the turn completes: it must have
received every host event the log journaled, each once, in order, and the turn's
phases in order. ``?after_seq=N`` resumes from a stream position as well.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import ApiProject, make_project, served, write_turn
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.services.turn_listing import journaled_events

CHATTY = [write_turn("write a", "a.txt", "A\n", chatter=12), write_turn("write b", "b.txt", "B\n")]


@pytest.fixture
def chatty(backend: str, tmp_path: Path) -> Iterator[ApiProject]:
    project = make_project(backend, tmp_path, CHATTY)
    try:
        yield project
    finally:
        project.client.close()
        project.store.close()


def frames(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The SSE frames of a response, as they arrive (comments skipped)."""
    frame: dict[str, Any] = {}
    for line in response.iter_lines():
        if not line:
            if frame:
                yield frame
            frame = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            frame[name] = json.loads(value) if name == "data" else value


def _wait(what: str, done: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_client_gets_each_host_event_once_in_order_across_a_reconnect(
    chatty: ApiProject,
) -> None:
    project = chatty
    sid = project.session_id
    reader = project.headers(project.share(sid, "read"))
    sessions = SessionService(project.store)
    runner = threading.Thread(target=project.run_turns, args=(1,), daemon=True)
    with served(project.app) as base, httpx.Client(base_url=base, timeout=30) as client:
        runner.start()
        _wait("the turn to start", lambda: sessions.load(sid).in_flight is not None)
        got: list[dict[str, Any]] = []
        url = f"/v1/sessions/{sid}/events"
        with client.stream("GET", url, headers=reader) as first:
            assert first.status_code == 200
            assert first.headers["content-type"].startswith("text/event-stream")
            for frame in frames(first):
                got.append(frame)
                if sum(f["event"] == "host" for f in got) == 3:
                    break  # hang up mid-turn
        last_id = got[-1]["id"]
        assert "-" in last_id  # a host event: record and position within it
        headers = {**reader, "Last-Event-ID": last_id}
        with client.stream("GET", url, headers=headers) as second:
            for frame in frames(second):
                got.append(frame)
                if frame["event"] == "phase" and frame["data"]["phase"] == "completed":
                    break
        runner.join(timeout=60)
    assert not runner.is_alive()
    journaled, _ = journaled_events(project.store, sid)
    assert len(journaled) >= 12
    host = [(f["data"]["turn_id"], f["data"]["seq"]) for f in got if f["event"] == "host"]
    assert host == [(e.turn_id, e.seq) for e in journaled]  # each once, in order
    assert [f["data"]["kind"] for f in got if f["event"] == "host"] == [e.kind for e in journaled]
    phases = [f["data"]["phase"] for f in got if f["event"] == "phase"]
    assert phases == ["accepted", "host_started", "receipt", "written_back", "completed"]
    ids = [f["id"] for f in got]
    assert len(ids) == len(set(ids))


def test_after_seq_resumes_from_a_stream_position(chatty: ApiProject) -> None:
    project = chatty
    sid = project.session_id
    project.run_turns(1)
    journaled, _ = journaled_events(project.store, sid)
    middle = journaled[len(journaled) // 2].stream_seq
    headers = project.headers()
    with served(project.app) as base, httpx.Client(base_url=base, timeout=30) as client:
        with client.stream(
            "GET", f"/v1/sessions/{sid}/events?after_seq={middle}&follow=false", headers=headers
        ) as answer:
            rest = [f for f in frames(answer) if f["event"] == "host"]
        bad = client.get(f"/v1/sessions/{sid}/events?after_seq=x1", headers=headers)
    expected = [(e.turn_id, e.seq) for e in journaled if e.stream_seq > middle]
    assert [(f["data"]["turn_id"], f["data"]["seq"]) for f in rest] == expected
    assert bad.status_code == 400
    assert bad.json()["error"]["reason"] == "bad_event_id"

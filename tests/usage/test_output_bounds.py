"""An agent that prints without end cannot fill the database or the controller's memory.

A user's ``subprocess`` agent prints 100 MB of text (or 400,000 JSONL events) and
exits 0; ``turnkeeper run --max-turns 1`` drives one turn with the default caps
(10,000 events, 4 MiB of event data per turn). The turn completes; the journal
keeps the first events up to the cap and one ``output.truncated`` event with the
count, size and sha256 of the rest; the database grows by what was kept plus a
small allowance; the controller's peak memory, measured by the kernel (``wait4``),
stays under a fixed bound.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

from tests.usage.project import UserProject, turnkeeper_executable

MAX_EVENTS = 10_000  # the documented defaults
MAX_OUTPUT_BYTES = 4 * 1024 * 1024
# What the store needs beyond the event data it keeps, which grows with the number
# of events, not their size: each journaled event is stored with its seq, and each
# batch of 100 is one record (timestamp, checksum) that SQLite spreads over overflow
# pages, the last one part empty. Measured: about 120 KiB for the 4,000 long lines
# below and 330 KiB for 10,000 small events (a few KiB of it the turn's other records
# and the session's projection row). The WAL is checkpointed into the file when
# `run` closes the store, so file + WAL is what stays on disk.
STORE_ALLOWANCE = 512 * 1024
# A `run --max-turns 1` whose agent prints nothing peaks at about 62 MiB, and at
# 72-75 MiB with either agent below: the bound leaves room for that and for the
# bounded event log, but not for 100 MB of output held whole.
PEAK_RSS_BOUND = 200 * 1024 * 1024
RUN_TIMEOUT = 300.0


def _encoded(kind: str, data: dict[str, Any]) -> bytes:
    obj = {"kind": kind, "data": data}
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


# Starts the command, reaps it with wait4 and prints its exit status and peak RSS.
# It runs in a fresh interpreter because ru_maxrss survives exec: a command started
# straight from this test process (itself large after building 100 MB of expected
# output) would report this process's peak, not its own.
_MEASURE = """
import json, os, subprocess, sys, time
timeout, out, *cmd = sys.argv[1:]
with open(out, "wb") as sink:
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + float(timeout)
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            break
        if time.monotonic() > deadline:
            proc.kill()  # its own child, by pid
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.05)
print(json.dumps({"code": os.waitstatus_to_exitcode(status), "maxrss_kib": usage.ru_maxrss}))
"""


def _measured_run(project: UserProject, *args: str) -> tuple[int, int, str]:
    """Run ``turnkeeper ARGS`` and reap it with ``wait4``: (exit status, peak RSS in
    bytes, output). The RSS is the kernel's account, not the product's."""
    out = project.root.parent / "measured-run.out"
    measure = [sys.executable, "-c", _MEASURE, str(RUN_TIMEOUT), str(out)]
    done = subprocess.run(
        [*measure, *turnkeeper_executable(), *args],
        cwd=project.root,
        env=project.env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT + 30,
        check=True,
    )
    measured = json.loads(done.stdout)
    return measured["code"], measured["maxrss_kib"] * 1024, out.read_text(errors="replace")


def _journaled_host_events(project: UserProject, session_id: str) -> list[dict[str, Any]]:
    """The session's journaled host events, read from the database file."""
    conn = sqlite3.connect(f"file:{project.database}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT payload FROM events WHERE stream_id = ? AND type = 'turn.host_events'"
            " ORDER BY seq",
            (f"session:{session_id}",),
        ).fetchall()
    finally:
        conn.close()
    return [event for (payload,) in rows for event in json.loads(payload)["events"]]


def _session(project: UserProject, config: dict[str, Any]) -> str:
    project.tk("goal", "add", "Write the changelog", "--id", "changelog")
    project.tk("todo", "add", "changelog", "Draft the entries", "--id", "t-draft")
    created = project.tk_json(
        "session",
        "create",
        "changelog",
        "--host",
        "subprocess",
        "--host-config",
        project.host_config("chatty", config),
        "--workspace",
        ".",
    )
    return str(created["session_id"])


def _expect_truncated(
    project: UserProject, session_id: str, outputs: Iterable[tuple[str, dict[str, Any]]]
) -> None:
    """The run that just ended journaled a prefix of ``outputs`` (every event the agent
    produced, computed here) and one ``output.truncated`` that accounts for the rest."""
    before_cut: list[bytes] = []
    kept_bytes = 0
    digest = hashlib.sha256()
    dropped_events = dropped_bytes = 0
    for kind, data in outputs:
        line = _encoded(kind, data)
        fits = len(before_cut) < MAX_EVENTS and kept_bytes + len(line) <= MAX_OUTPUT_BYTES
        if fits and not dropped_events:
            before_cut.append(line)
            kept_bytes += len(line)
        else:
            dropped_events += 1
            dropped_bytes += len(line)
            digest.update(line + b"\n")
    assert dropped_events > 0

    journal = _journaled_host_events(project, session_id)
    assert [e["seq"] for e in journal] == list(range(1, len(journal) + 1))
    assert [_encoded(e["kind"], e["data"]) for e in journal[:-1]] == before_cut
    truncated = journal[-1]
    assert truncated["kind"] == "output.truncated"
    assert truncated["data"]["dropped_events"] == dropped_events
    assert truncated["data"]["dropped_bytes"] == dropped_bytes
    assert truncated["data"]["sha256"] == digest.hexdigest()

    shown = project.tk_json("session", "show", session_id)
    assert shown["counters"]["turns_completed"] == 1
    assert shown["counters"]["turns_failed"] == 0
    assert shown["counters"]["host_events"] == len(journal)
    assert shown["in_flight"] is None
    project.tk("verify")  # every record and projection is sound


def _run_one_turn(project: UserProject) -> tuple[int, int]:
    """``run --max-turns 1``: (database growth in bytes, controller peak RSS in bytes)."""
    before = project.database_bytes()
    code, peak_rss, output = _measured_run(project, "run", "--max-turns", "1", "--json")
    assert code == 0, output[-4000:]
    summary = json.loads(output.strip().splitlines()[-1])
    assert (summary["turns"], summary["failed_turns"]) == (1, 0), output[-4000:]
    return project.database_bytes() - before, peak_rss


def test_an_agent_printing_100_mb_completes_its_turn_within_the_caps(
    user_project: UserProject,
) -> None:
    line = "x" * 1000
    total = 100_000_000
    agent = user_project.agent(
        "chatty.sh", f"#!/bin/sh\n# far too talkative\nyes '{line}' | head -c {total}\n"
    )
    sid = _session(user_project, {"command": [str(agent)]})

    growth, peak_rss = _run_one_turn(user_project)

    full, rest = divmod(total, len(line) + 1)
    texts = [line] * full + ([line[:rest]] if rest else [])
    outputs = [("output", {"text": text}) for text in texts]
    _expect_truncated(user_project, sid, outputs)
    assert growth <= MAX_OUTPUT_BYTES + STORE_ALLOWANCE, growth
    assert peak_rss < PEAK_RSS_BOUND, f"controller peaked at {peak_rss / 2**20:.0f} MiB"


def test_an_agent_emitting_400k_events_completes_its_turn_within_the_caps(
    user_project: UserProject,
) -> None:
    count = 400_000
    agent = user_project.agent(
        "notes.py",
        f"#!{sys.executable}\n"
        "import json\n"
        f"for i in range({count}):\n"
        "    print(json.dumps({'kind': 'note', 'data': {'i': i, 'step': 'thinking'}}))\n",
    )
    sid = _session(user_project, {"command": [str(agent)], "event_format": "jsonl"})

    growth, peak_rss = _run_one_turn(user_project)

    outputs = [("note", {"i": i, "step": "thinking"}) for i in range(count)]
    _expect_truncated(user_project, sid, outputs)
    # Each kept event is journaled with the time its line was read ("at", an ISO
    # timestamp with microseconds): part of what the store keeps per event.
    stamp = len(',"at":""') + len("2026-12-07T05:50:37.123456Z")
    kept = sum(len(_encoded(k, d)) + stamp for k, d in outputs[:MAX_EVENTS])
    # The event cap, not the byte cap, cut this one: the store grew by what it kept.
    assert growth <= kept + STORE_ALLOWANCE, (growth, kept)
    assert growth <= MAX_OUTPUT_BYTES + STORE_ALLOWANCE
    assert peak_rss < PEAK_RSS_BOUND, f"controller peaked at {peak_rss / 2**20:.0f} MiB"


def test_a_run_that_prints_nothing_stays_far_below_the_memory_bound(
    user_project: UserProject,
) -> None:
    """The baseline the bound above is set against."""
    sid = _session(user_project, {"command": ["true"]})
    _, peak_rss = _run_one_turn(user_project)
    assert user_project.tk_json("session", "show", sid)["counters"]["turns_completed"] == 1
    assert peak_rss < PEAK_RSS_BOUND / 2, f"baseline peaked at {peak_rss / 2**20:.0f} MiB"

"""The standard crash-test project's goal and todos, and the scripted agent's turns.

The project every test starts from has goal ``g`` with todo ``t1`` ("write a", needs
evidence ``a-exists``) and todo ``t2`` ("write b", depends on ``t1``, needs
``b-exists``). The builders here make the ``scripted`` host's turns for them: a turn
that writes its file, one that pauses mid-turn, one that fails its host.
"""

from __future__ import annotations

from typing import Any

from turnkeeper.runtime.turn.driver import EVENT_BATCH

GOAL_ID = "g"
TODO_A, TITLE_A, FILE_A, EVIDENCE_A = "t1", "write a", "a.txt", "a-exists"
TODO_B, TITLE_B, FILE_B, EVIDENCE_B = "t2", "write b", "b.txt", "b-exists"
CONTENT_A, CONTENT_B = "A\n", "B\n"
PAUSE_NAME = "mid-turn"

# The paused turn emits exactly as many events as make its second batch of host events
# (the driver journals EVENT_BATCH at a time) end with the very event that pauses it:
# seq 1 session.bound (batch 1), then file.changed, command, the filler, checkpoint =
# seq 2 .. EVENT_BATCH + 1 (batch 2). A kill at that batch therefore finds the host
# paused with its detached shell child running, whatever the scheduling.
FILLER_EVENTS = EVENT_BATCH - 3
PAUSED_LAST_SEQ = EVENT_BATCH + 1
# ``host.events`` hits of one control plane before the batch that pauses the turn on
# ``t2``: turn 1 journals two batches (session.bound; file.changed + result), the
# paused turn's session.bound is the third.
HOST_EVENTS_PAUSED_BATCH_ON_T2 = 4
# Where a control plane running :func:`paused_on_t2_script` dies with the first turn on
# ``t2`` paused mid-turn: its host and the host's detached child outlive it.
CRASH_PAUSED_ON_T2 = f"host.events@{HOST_EVENTS_PAUSED_BATCH_ON_T2}"


def _match(title: str, attempt: int | None, kind: str | None) -> dict[str, Any]:
    match: dict[str, Any] = {"todo": title}
    if attempt is not None:
        match["attempt"] = attempt
    if kind is not None:
        match["kind"] = kind
    return match


def write_turn(
    title: str,
    path: str,
    content: str,
    evidence_key: str,
    *,
    attempt: int | None = None,
    kind: str | None = None,
) -> dict[str, Any]:
    """A turn that writes one file and reports the todo done with evidence for it."""
    return {
        "match": _match(title, attempt, kind),
        "steps": [{"op": "write", "path": path, "content": content}],
        "result": {
            "todo_done": True,
            "evidence": [{"key": evidence_key, "command": f"test -f {path}"}],
        },
    }


def paused_turn(title: str, path: str, *, attempt: int = 1) -> dict[str, Any]:
    """A turn that writes half its work, detaches ``sleep 600`` (a ``setsid`` shell
    child, like an agent CLI's shell tool) and pauses forever: it only ever ends by
    being killed. Its result would claim the todo done if it ever got that far."""
    filler = [{"op": "emit", "kind": "progress", "data": {"n": n}} for n in range(FILLER_EVENTS)]
    return {
        "match": _match(title, attempt, None),
        "steps": [
            {"op": "write", "path": path, "content": "partial\n"},
            {"op": "shell", "command": "sleep 600", "detach": True},
            *filler,
            {"op": "checkpoint", "name": PAUSE_NAME, "pause": True},
        ],
        "result": {"todo_done": True},
    }


def bound_then_silent_turn(title: str, *, attempt: int = 1) -> dict[str, Any]:
    """A turn that binds its host session (an urgent event: the driver journals it at
    once, with the host's start) and then sleeps without a word: a control plane killed
    right after that journal write leaves the host alive and silent, so it does not
    end itself on a broken pipe. Its result would claim the todo done."""
    return {
        "match": _match(title, attempt, None),
        "steps": [{"op": "sleep", "seconds": 600}],
        "result": {"todo_done": True},
    }


def fault_turn(title: str, path: str, fault: dict[str, Any], *, attempt: int = 1) -> dict[str, Any]:
    """A turn that writes half its work and then fails its host with ``fault``."""
    return {
        "match": _match(title, attempt, None),
        "steps": [{"op": "write", "path": path, "content": "partial\n"}, fault],
        "result": {"todo_done": True},
    }


def standard_script(first_b_turn: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """``t1`` succeeds; the first attempt on ``t2`` is ``first_b_turn`` (default: a
    success); every later attempt on ``t2`` succeeds. First match wins."""
    turns = [write_turn(TITLE_A, FILE_A, CONTENT_A, EVIDENCE_A)]
    if first_b_turn is not None:
        turns.append(first_b_turn)
    turns.append(write_turn(TITLE_B, FILE_B, CONTENT_B, EVIDENCE_B))
    return turns


def paused_on_t2_script() -> list[dict[str, Any]]:
    """``t1`` succeeds; the first turn on ``t2`` pauses mid-turn (see :func:`paused_turn`)."""
    return standard_script(paused_turn(TITLE_B, FILE_B))

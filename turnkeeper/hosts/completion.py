"""When a turn that printed no ``result`` completes its todo: one rule for every command host.

An agent that reports through a ``result`` event says itself whether its todo is
done (``todo_done``), and that always wins. A plain command (``event_format:
text``, or ``jsonl`` without a ``result`` line) cannot; the agent CLI hosts
(Codex, Claude Code) derive it from their final message. Both use this rule:

* ``on_success`` (the default): a successful turn (exit 0) on a todo marks it done;
* ``on_marker``: only when ``done_marker`` appears in the output (a text line or a
  ``message`` event's text for a command; the final message for an agent CLI);
* ``never``: the turn never completes its todo (only an explicit result does).

Marking a todo done is a proposal like any other: the goal kernel still refuses a
todo whose required evidence is missing, and the progress guard stops a session
whose turns change nothing, so ``on_success`` cannot loop or close work unproven.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

CompletionRule = Literal["on_success", "on_marker", "never"]
DEFAULT_COMPLETION_RULE: CompletionRule = "on_success"
DEFAULT_DONE_MARKER = "TODO DONE"
DoneMarker = Annotated[str, Field(min_length=1)]


def completes_todo(rule: CompletionRule, marker_seen: bool) -> bool:
    """Whether a successful turn completes its todo under ``rule``."""
    if rule == "never":
        return False
    if rule == "on_marker":
        return marker_seen
    return True

"""The turn brief: what an agent is told at the start of every turn, as one typed model.

A new or resumed agent must rebuild the conditions for acting before it acts, not
replay its old transcript: the goal and its acceptance, the todo and the evidence it
needs, why the last attempt was refused, the gates and replan obligations, what a
lost turn had done, the workspace as probed now, and when to stop. The runtime builds
a :class:`TurnBrief` from the durable state at every turn (runtime/turn/brief.py);
every host receives :func:`render` of it as its instructions, and an own agent that
reads its request as JSON finds the model itself under ``request.brief``.

The model is versioned (``version``) like every record an agent may parse. It is
bounded: every list holds at most :data:`MAX_LISTED` entries, with the number left
out beside it, and every free text is clipped, so a goal with a thousand todos still
makes a brief of a few kilobytes. docs/agents.md documents it for every turn kind.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from turnkeeper.vocabulary import TurnKind

BRIEF_VERSION: Final = 1
# Entries of any one list a brief carries; the rest are counted in ``*_more``.
MAX_LISTED: Final = 10
# Characters of an output tail (a failing check's, a host error's) a brief quotes.
MAX_TAIL: Final = 1200
# Characters of any other free text (a title, a reason, a detail).
MAX_TEXT: Final = 500


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut to ``limit`` characters, the cut marked."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clip_tail(text: str, limit: int = MAX_TAIL) -> str:
    """The last ``limit`` characters of ``text`` (an output's end says why it failed)."""
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


class _Part(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CriterionBrief(_Part):
    id: str
    text: str
    met: bool


class GoalBrief(_Part):
    id: str
    title: str
    objective: str = ""
    criteria: list[CriterionBrief] = Field(default_factory=list)
    criteria_more: int = 0


EvidenceStatus = Literal["missing", "passed", "failed", "stale"]


class EvidenceNeed(_Part):
    """One evidence key the todo requires, and where it stands now."""

    key: str
    status: EvidenceStatus
    # The command that produces it, where one is configured (the host config's).
    command: str | None = None
    exit_code: int | None = None
    recorded_at: datetime | None = None
    revision: str | None = None
    output_tail: str = ""


class TodoRef(_Part):
    id: str
    title: str
    status: str


class TodoBrief(_Part):
    id: str
    title: str
    status: str
    depends_on: list[TodoRef] = Field(default_factory=list)
    required_evidence: list[EvidenceNeed] = Field(default_factory=list)
    successor_required: bool = False
    successor_of: str | None = None


class WorkCounts(_Part):
    """The goal's other todos: counts by status, and the first open ones by name."""

    open: int = 0
    claimed: int = 0
    done: int = 0
    blocked: int = 0
    superseded: int = 0
    listed: list[TodoRef] = Field(default_factory=list)
    listed_more: int = 0


class Refusal(_Part):
    """A part of the previous attempt that the kernel refused, and why."""

    what: str  # "complete todo t-a", "proposal 2 (add_todo)", "evidence tests", ...
    reason: str  # the kernel's reason code: evidence_failed, missing_evidence, ...
    detail: str = ""


class FailedCheck(_Part):
    key: str
    command: str
    exit_code: int
    output_tail: str = ""


class PreviousAttempt(_Part):
    """How the session's previous turn on this work ended."""

    turn_id: str
    outcome: str  # completed, failed, lost, abandoned
    refusals: list[Refusal] = Field(default_factory=list)
    failed_checks: list[FailedCheck] = Field(default_factory=list)
    host_error: str | None = None
    # The tool calls of a failed turn: none of them was applied.
    unapplied_calls: list[str] = Field(default_factory=list)


class GateBrief(_Part):
    id: str
    title: str
    blocking: bool
    scope: list[str] = Field(default_factory=list)
    status: str
    decision: str | None = None
    decided_by: str | None = None


class ObligationBrief(_Part):
    id: str
    trigger: str
    subject: str
    detail: str


class LostTurn(_Part):
    """A turn that ended with nobody watching it (a crash): what it had done."""

    turn_id: str
    cause: str
    actions: list[str] = Field(default_factory=list)  # its last commands and tool calls
    actions_more: int = 0


class WorkspaceProbe(_Part):
    """The workspace as probed at the start of this turn (never replayed from the log)."""

    path: str
    revision: str | None = None
    dirty: bool | None = None
    changed: list[str] = Field(default_factory=list)  # ``git status --short`` lines
    changed_more: int = 0
    probed_at: datetime


class StopConditions(_Part):
    stop_condition: str
    attempt: int
    max_attempts: int | None = None
    turns_without_progress: int = 0
    max_turns_without_progress: int | None = None
    timeout_seconds: float | None = None
    silence_seconds: float | None = None


class TurnBrief(_Part):
    version: Literal[1] = BRIEF_VERSION
    turn_id: str
    session_id: str
    kind: TurnKind
    attempt: int
    goal: GoalBrief
    todo: TodoBrief | None = None
    work: WorkCounts = WorkCounts()
    # The latest record of each evidence key the goal holds, newest first: what a
    # criterion can be met with (``meet_criterion``) and what is failing.
    evidence: list[EvidenceNeed] = Field(default_factory=list)
    evidence_more: int = 0
    previous: PreviousAttempt | None = None
    gates: list[GateBrief] = Field(default_factory=list)
    gates_more: int = 0
    replan: list[ObligationBrief] = Field(default_factory=list)
    replan_more: int = 0
    vision_due: list[str] = Field(default_factory=list)
    lost_turn: LostTurn | None = None
    # What recovery says of the turn this one continues (a lost or failed turn).
    note: str | None = None
    reprobe: list[str] = Field(default_factory=list)
    workspace: WorkspaceProbe | None = None
    stop: StopConditions
    # The turnkeeper tools this turn's agent may call (empty: none are offered).
    tools: list[str] = Field(default_factory=list)


# --- the text every host receives ------------------------------------------------------

_ASK: Final[dict[TurnKind, str]] = {
    TurnKind.START: "Start todo {todo} (attempt {attempt}).",
    TurnKind.CONTINUATION: (
        "Continue todo {todo}. Check what is already done before doing it again: the "
        "resumed session's memory is not proof of the present."
    ),
    TurnKind.RETRY: "Retry todo {todo} (attempt {attempt}): the last attempt did not finish it.",
    TurnKind.REPLAN: (
        "Replan the goal: resolve the replan obligations below with an observable delta "
        "(add a todo or a successor, patch your vision, change the acceptance) or a "
        "structured no-follow-up."
    ),
    TurnKind.REPAIR: (
        "Self-repair: the goal's status disagrees with its event log. Identify the "
        "authoritative source, repair through the owning protocol, then recompute and "
        "validate. Do not lower gates or guess permissions."
    ),
}


def _more(n: int) -> list[str]:
    return [f"- … and {n} more"] if n > 0 else []


def _evidence_line(need: EvidenceNeed) -> str:
    line = f"- `{need.key}`: {need.status}"
    if need.exit_code is not None and need.status != "missing":
        line += f" (exit {need.exit_code}"
        line += f", at {need.recorded_at:%Y-%m-%d %H:%M:%S}Z)" if need.recorded_at else ")"
    if need.command:
        line += f" — run: `{need.command}`"
    if need.status in ("failed",) and need.output_tail:
        line += "\n  last output:\n" + _indent(need.output_tail)
    return line


def _indent(text: str) -> str:
    return "\n".join("    " + ln for ln in text.rstrip().splitlines())


def render(brief: TurnBrief) -> str:
    """The brief as the text a host gives its agent: the ask first, then the state."""
    todo = brief.todo
    named = f"{todo.id}: {todo.title}" if todo else "-"
    ask = _ASK[brief.kind].format(todo=named, attempt=brief.attempt)
    out = [f"# turnkeeper turn {brief.turn_id} — {brief.kind.value}, attempt {brief.attempt}"]
    out += ["", ask]
    out += _previous(brief)
    out += _lost(brief)
    out += ["", f"## Goal {brief.goal.id}: {brief.goal.title}"]
    if brief.goal.objective:
        out.append(brief.goal.objective)
    if brief.goal.criteria:
        out.append("Acceptance criteria:")
        out += [
            f"- [{'x' if c.met else ' '}] {c.id}: {c.text}" for c in brief.goal.criteria
        ] + _more(brief.goal.criteria_more)
    if todo is not None:
        out += ["", f"## Todo {todo.id}: {todo.title} ({todo.status})"]
        if todo.successor_of:
            out.append(f"Successor of {todo.successor_of}.")
        if todo.depends_on:
            out.append("Depends on: " + ", ".join(f"{d.id} ({d.status})" for d in todo.depends_on))
        if todo.required_evidence:
            out.append("Required evidence (turnkeeper runs each command again before it counts):")
            out += [_evidence_line(n) for n in todo.required_evidence]
        if todo.successor_required:
            out.append("Completing it requires a successor todo.")
    out += _work(brief.work)
    if brief.evidence:
        out += ["", "## Other evidence on record (the latest of each key)"]
        out += [_evidence_line(n) for n in brief.evidence] + _more(brief.evidence_more)
    out += _gates_and_replan(brief)
    out += _workspace(brief)
    out += _stop(brief)
    return "\n".join(out) + "\n"


def _previous(brief: TurnBrief) -> list[str]:
    prev = brief.previous
    if prev is None or (not prev.refusals and not prev.failed_checks and not prev.host_error):
        return []
    out = ["", f"## Why the previous attempt did not finish (turn {prev.turn_id}, {prev.outcome})"]
    for refusal in prev.refusals:
        line = f"- refused: {refusal.what}: {refusal.reason}"
        out.append(line + (f" — {refusal.detail}" if refusal.detail else ""))
    for check in prev.failed_checks:
        out.append(f"- evidence `{check.key}` failed: `{check.command}` exited {check.exit_code}")
        if check.output_tail:
            out.append("  last output:\n" + _indent(check.output_tail))
    if prev.host_error:
        out.append(f"- the agent's run failed: {prev.host_error}")
    if prev.unapplied_calls:
        out.append("- so none of its tool calls was applied:")
        out += [f"  - {call}" for call in prev.unapplied_calls]
    out.append("Fix the cause before you report the todo done again.")
    return out


def _lost(brief: TurnBrief) -> list[str]:
    lost = brief.lost_turn
    out: list[str] = []
    if lost is not None:
        out += [
            "",
            f"## The previous turn {lost.turn_id} was lost ({lost.cause})",
            "Nothing it reported was applied. What it had started:",
        ]
        out += [f"- {a}" for a in lost.actions] or ["- (nothing was journaled)"]
        out += _more(lost.actions_more)
        out.append("Reconcile: check which of these took effect before you redo anything.")
    if brief.note:
        out += ["", brief.note]
    if brief.reprobe:
        out += ["", "Probe again before you rely on them: " + ", ".join(brief.reprobe) + "."]
    return out


def _work(work: WorkCounts) -> list[str]:
    counts = [
        f"{n} {name}"
        for name, n in (
            ("open", work.open),
            ("claimed", work.claimed),
            ("done", work.done),
            ("blocked", work.blocked),
            ("superseded", work.superseded),
        )
        if n
    ]
    if not counts:
        return []
    out = ["", "## Other todos: " + ", ".join(counts)]
    out += [f"- {t.id}: {t.title} ({t.status})" for t in work.listed] + _more(work.listed_more)
    return out


def _gates_and_replan(brief: TurnBrief) -> list[str]:
    out: list[str] = []
    if brief.gates:
        out += ["", "## Gates"]
        for gate in brief.gates:
            scope = f" on {', '.join(gate.scope)}" if gate.scope else " on the whole goal"
            kind = "blocking" if gate.blocking else "advisory"
            line = f"- {gate.id}: {gate.title} — {gate.status}, {kind}{scope}"
            if gate.decision is not None:
                line += f"; decided {gate.decision!r} by {gate.decided_by}"
            out.append(line)
        out += _more(brief.gates_more)
    if brief.replan:
        out += ["", "## Replan obligations (each needs a delta or a no-follow-up)"]
        out += [f"- {o.id} ({o.trigger}, {o.subject}): {o.detail}" for o in brief.replan]
        out += _more(brief.replan_more)
    if brief.vision_due:
        out += ["", "Vision checkpoint due for: " + ", ".join(brief.vision_due) + "."]
    return out


def _workspace(brief: TurnBrief) -> list[str]:
    ws = brief.workspace
    if ws is None:
        return []
    state = "unknown" if ws.dirty is None else ("uncommitted changes" if ws.dirty else "clean")
    out = ["", f"## Workspace {ws.path}", f"Revision {ws.revision or '(none)'}, {state}."]
    out += [f"    {line}" for line in ws.changed]
    if ws.changed_more:
        out.append(f"    … and {ws.changed_more} more")
    return out


def _stop(brief: TurnBrief) -> list[str]:
    stop = brief.stop
    out = ["", "## When to stop", stop.stop_condition]
    if stop.max_attempts is not None:
        out.append(
            f"This is attempt {stop.attempt}; a failed turn is tried again up to attempt "
            f"{stop.max_attempts}."
        )
    if stop.max_turns_without_progress is not None:
        out.append(
            f"Turns in a row that changed nothing in the goal: {stop.turns_without_progress} "
            f"(at {stop.max_turns_without_progress} the goal asks for a replan, and a session "
            "whose replans change nothing is suspended)."
        )
    if stop.timeout_seconds is not None:
        out.append(f"The turn is ended after {stop.timeout_seconds:.0f} s.")
    if stop.silence_seconds is not None:
        out.append(
            f"A turn that shows no progress for {stop.silence_seconds:.0f} s (no event, no "
            "CPU) is ended as hung."
        )
    if brief.tools:
        out += [
            "",
            "Report through the turnkeeper tools (" + ", ".join(brief.tools) + "): each "
            "answers with what turnkeeper would decide now; it decides for real when the "
            "turn ends.",
        ]
    return out

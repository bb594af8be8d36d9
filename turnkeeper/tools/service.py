"""The tools themselves, apart from the MCP wire: each takes its arguments, returns its
answer as text, or raises a typed error (tools/server.py turns that into an MCP error
result).

Every call first attaches to the turn's channel (tools/channel.py): a call without this
turn's capability, or after the turn ended, is ``PERMISSION_DENIED`` and writes nothing.
A proposing tool then checks its arguments against the kernel's limits (a value they
refuse is ``INVALID_ARGUMENT``, and nothing is journaled), runs what it must run
(``record_evidence``'s command, before the journal is locked), and under the journal's
lock numbers the call, dry-runs it with every call before it (tools/dryrun.py) and
appends it. A call the dry run refuses is journaled all the same: the write-back
decides for real, and its refusal is what the next turn's brief names. A refusal for a
malformed value (``INVALID_ARGUMENT`` from the kernel) is the exception: the call could
never be accepted as made, so it is refused at once and not journaled.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from turnkeeper.brief import render
from turnkeeper.errors import InvalidArgument, TurnkeeperError
from turnkeeper.json_types import JsonValue
from turnkeeper.kernel.audit import missing_vision_checkpoints
from turnkeeper.kernel.limits import json_problem
from turnkeeper.kernel.model import GoalState, NoFollowUpReason, VisionStatus
from turnkeeper.kernel.proposals import RecordEvidence, checked_input
from turnkeeper.tools.calls import (
    AddTodoCall,
    CriterionArg,
    MeetCriterionCall,
    NoFollowUpCall,
    OpenGateCall,
    RecordEvidenceCall,
    RequestEffectCall,
    TodoDoneCall,
    ToolCall,
    UpdateAcceptanceCall,
    VisionCheckpointCall,
    evidence_id,
)
from turnkeeper.tools.channel import Channel, attach
from turnkeeper.tools.checks import CHECK_TIMEOUT_SECONDS, TIMEOUT_EXIT_CODE, run_check
from turnkeeper.tools.dryrun import (
    Replay,
    Verdict,
    answer,
    describe_refusal,
    goal_view,
    replay,
)
from turnkeeper.vocabulary import TurnKind

_log = logging.getLogger(__name__)

DEFAULT_FRESHNESS_SECONDS = 3600

# Builds the call to journal from its number in the turn and the calls before it.
_MakeCall = Callable[[int, list[ToolCall]], ToolCall]


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _require_text(field: str, value: str) -> None:
    # The kernel refuses an empty value at decide time; a tool says so before it runs
    # anything, so an empty command is never run.
    if not value.strip():
        raise InvalidArgument(
            f"{field} must not be empty", reason="empty_text", details={"field": field}
        )


class ToolService:
    """The turnkeeper tools of the turn ``env`` names (TURNKEEPER_TOOLS_DIR/_TOKEN)."""

    def __init__(self, env: Mapping[str, str], clock: Callable[[], datetime] = _utc_now) -> None:
        self._env = dict(env)
        self._clock = clock
        # The channel's goal, decoded by the first call that needed it (see _goal_of).
        self._goal: GoalState | None = None
        self._goal_lock = threading.Lock()

    def _goal_of(self, channel: Channel) -> GoalState:
        """The goal as the turn began, decoded once for all the calls this server answers.

        A goal that has lived for days is megabytes of snapshot and events (~0.2 s to
        decode at 10,000 todos), and every call needs it: decoded on each, it was what an
        agent waited for on every call. It cannot change under this server: a channel's
        goal files are written before its token, and a channel opened again gets a new
        token, which this server's calls do not carry (``attach`` refuses them,
        ``not_this_turn``). Under a lock, so that two calls at once decode it once; a goal
        that does not decode is not held, and every call meets its ``DATA_LOSS``. What is
        held is the server's for its life, one turn: ~29 MiB at 10,000 todos, as much as
        a call's own decode left the process holding before (measured: the goal freed,
        the process's resident memory stayed 29 MiB larger).
        """
        with self._goal_lock:
            if self._goal is None:
                self._goal = channel.goal()
            return self._goal

    def read_ahead(self) -> threading.Thread:
        """Start decoding the goal in a thread of its own, before any call asks for it.

        A tool server starts it when it starts: the agent's model then takes seconds to
        make its first request, and that call finds the goal decoded instead of waiting
        for it (~0.15 s at 10,000 todos; almost every turn needs the goal, for
        ``todo_done`` if nothing else). A call that comes first waits on the lock for
        the one decoding. A typed failure (no channel, a goal that does not decode) is
        not lost: nothing is held, and every call that needs the goal meets the same
        error as its answer; here it is only logged. Anything else is a bug, and goes to
        the thread's excepthook like any thread's.
        """

        def read() -> None:
            try:
                self._goal_of(attach(self._env))
            except TurnkeeperError as error:  # each call meets it again, as its own answer
                _log.info("the turn's goal was not read ahead: %s", error)

        thread = threading.Thread(target=read, name="goal read-ahead", daemon=True)
        thread.start()
        return thread

    # --- reading -------------------------------------------------------------------

    def brief(self) -> str:
        return render(attach(self._env).brief())

    def goal(self) -> str:
        channel = attach(self._env)
        calls = channel.read().calls
        result = replay(channel.turn, self._goal_of(channel), calls, self._clock())
        return goal_view(channel.turn, result, calls)

    # --- proposing -----------------------------------------------------------------

    def _discharges(
        self,
        channel: Channel,
        earlier: list[ToolCall],
        given: list[str] | None,
        *,
        replan_only: bool,
    ) -> list[str]:
        """The obligations a delta answers: those named, else — for a no-follow-up, and
        for any delta made in a replan turn — every obligation open now (what the brief
        asked to resolve), so an agent need not copy ids it was just shown."""
        if given:
            return given
        if replan_only and channel.brief().kind is not TurnKind.REPLAN:
            return []
        state = replay(channel.turn, self._goal_of(channel), earlier, self._clock()).state
        return [o.id for o in state.open_obligations()]

    def record_evidence(
        self,
        command: str,
        key: str | None = None,
        freshness_seconds: int = DEFAULT_FRESHNESS_SECONDS,
    ) -> str:
        channel = attach(self._env)
        _require_text("command", command)
        if freshness_seconds <= 0:
            raise InvalidArgument(
                "freshness_seconds must be positive",
                reason="non_positive_value",
                details={"field": "freshness_seconds"},
            )
        with checked_input():  # what the kernel would refuse must not cost a run
            RecordEvidence(
                evidence_id=evidence_id(channel.turn.turn_id, 0),
                command=command,
                key=key or None,
                exit_code=0,
                freshness_seconds=freshness_seconds,
            )
        run = run_check(command, channel.turn.workspace)

        def make(seq: int, _: list[ToolCall]) -> ToolCall:
            return RecordEvidenceCall(
                seq=seq,
                at=self._clock(),
                command=command,
                key=key or None,
                freshness_seconds=freshness_seconds,
                exit_code=run.exit_code,
                output_tail=run.output_tail,
                output_digest=run.output_digest,
                timed_out=run.timed_out,
                ran_at=run.ran_at,
            )

        call, result, verdict = self._journal(channel, make)
        assert isinstance(call, RecordEvidenceCall)
        ended = (
            f"timed out after {CHECK_TIMEOUT_SECONDS:.0f} s (exit {TIMEOUT_EXIT_CODE})"
            if run.timed_out
            else f"exit {run.exit_code}"
        )
        out = [f"`{command}` ran in {channel.turn.workspace}: {ended} ({run.seconds:.1f} s)"]
        if run.output_tail:
            out += ["last output:", *("    " + line for line in run.output_tail.splitlines())]
        if verdict.accepted:
            out.append(
                f"journaled as evidence `{call.evidence_key}`; turnkeeper runs the command "
                "again when the turn ends, and only that run counts."
            )
        else:
            out.append(answer(verdict, result))
        if result.completion is not None:
            # Its output is above already, if its refusal is this check's.
            out.append(_completion_line(result, output=False))
        return "\n".join(out) + "\n"

    def todo_done(self, summary: str = "") -> str:
        channel = attach(self._env)
        _, result, verdict = self._journal(
            channel, lambda seq, _: TodoDoneCall(seq=seq, at=self._clock(), summary=summary)
        )
        text = answer(verdict, result)
        if verdict.accepted:
            text += (
                " (turnkeeper runs every evidence command of the turn again first, and the "
                "todo is done only if they pass then too)"
            )
        return text + "\n"

    def add_todo(
        self,
        title: str,
        todo_id: str | None = None,
        depends_on: list[str] | None = None,
        required_evidence: list[str] | None = None,
        successor_of: str | None = None,
        discharges: list[str] | None = None,
    ) -> str:
        channel = attach(self._env)
        turn_id = channel.turn.turn_id

        def make(seq: int, earlier: list[ToolCall]) -> ToolCall:
            return AddTodoCall(
                seq=seq,
                at=self._clock(),
                # A missing id is made from the turn and the call's number: unique, and
                # the same in the answer as at the write-back.
                todo_id=todo_id or f"{turn_id}-todo-{seq}",
                title=title,
                depends_on=depends_on or [],
                required_evidence=required_evidence or [],
                successor_of=successor_of,
                discharges=self._discharges(channel, earlier, discharges, replan_only=True),
            )

        call, result, verdict = self._journal(channel, make)
        assert isinstance(call, AddTodoCall)
        return f"todo `{call.todo_id}`: " + answer(verdict, result) + "\n"

    def update_acceptance(
        self,
        criteria: list[CriterionArg],
        mode: str = "add",
        discharges: list[str] | None = None,
    ) -> str:
        channel = attach(self._env)
        if mode not in ("add", "replace"):
            raise InvalidArgument(
                f"mode must be 'add' or 'replace', not {mode!r}",
                reason="invalid_mode",
                details={"field": "mode"},
            )
        _, result, verdict = self._journal(
            channel,
            lambda seq, earlier: UpdateAcceptanceCall(
                seq=seq,
                at=self._clock(),
                criteria=criteria,
                mode="add" if mode == "add" else "replace",
                discharges=self._discharges(channel, earlier, discharges, replan_only=True),
            ),
        )
        return answer(verdict, result) + "\n"

    def no_follow_up(
        self, reason: NoFollowUpReason, summary: str, discharges: list[str] | None = None
    ) -> str:
        channel = attach(self._env)
        _, result, verdict = self._journal(
            channel,
            lambda seq, earlier: NoFollowUpCall(
                seq=seq,
                at=self._clock(),
                reason=reason,
                summary=summary,
                discharges=self._discharges(channel, earlier, discharges, replan_only=False),
            ),
        )
        return answer(verdict, result) + "\n"

    def vision_checkpoint(
        self,
        status: VisionStatus,
        reason: str = "",
        vision_text: str | None = None,
        discharges: list[str] | None = None,
        agent: str | None = None,
    ) -> str:
        channel = attach(self._env)

        def make(seq: int, earlier: list[ToolCall]) -> ToolCall:
            state = replay(channel.turn, self._goal_of(channel), earlier, self._clock()).state
            return VisionCheckpointCall(
                seq=seq,
                at=self._clock(),
                agent=agent or _vision_agent(state),
                status=status,
                reason=reason,
                vision_text=vision_text,
                discharges=self._discharges(channel, earlier, discharges, replan_only=True),
            )

        call, result, verdict = self._journal(channel, make)
        assert isinstance(call, VisionCheckpointCall)
        return f"vision checkpoint of `{call.agent}`: " + answer(verdict, result) + "\n"

    def meet_criterion(self, criterion_id: str, evidence_key: str) -> str:
        channel = attach(self._env)
        _require_text("evidence_key", evidence_key)

        def make(seq: int, earlier: list[ToolCall]) -> ToolCall:
            own = any(
                isinstance(c, RecordEvidenceCall) and c.evidence_key == evidence_key
                for c in earlier
            )
            found = None if own else self._goal_of(channel).latest_evidence(evidence_key)
            return MeetCriterionCall(
                seq=seq,
                at=self._clock(),
                criterion_id=criterion_id,
                evidence_key=evidence_key,
                resolved_evidence_id=found.id if found is not None else None,
            )

        call, result, verdict = self._journal(channel, make)
        assert isinstance(call, MeetCriterionCall)
        source = (
            "this turn's latest record"
            if call.resolved_evidence_id is None
            else f"the goal's record `{call.resolved_evidence_id}` (or this turn's, if it "
            "records one with that key)"
        )
        refusal = verdict.refusal
        if refusal is not None and refusal.reason == "evidence_missing":
            return (
                f"journaled; the kernel would refuse it now: evidence_missing — no evidence "
                f"with key `{evidence_key}` in this turn or the goal: call "
                f"record_evidence(command=..., key={evidence_key!r}) first; the criterion is "
                "met with this turn's latest record of that key when the turn ends\n"
            )
        text = answer(verdict, result)
        if verdict.accepted:
            text += f"; it is met with {source} of `{evidence_key}`"
        return text + "\n"

    def open_gate(
        self,
        title: str,
        blocking: bool = True,
        scope: list[str] | None = None,
        gate_id: str | None = None,
    ) -> str:
        channel = attach(self._env)
        turn_id = channel.turn.turn_id
        call, result, verdict = self._journal(
            channel,
            lambda seq, _: OpenGateCall(
                seq=seq,
                at=self._clock(),
                gate_id=gate_id or f"{turn_id}-gate-{seq}",
                title=title,
                blocking=blocking,
                scope=scope or [],
            ),
        )
        assert isinstance(call, OpenGateCall)
        text = f"gate `{call.gate_id}`: " + answer(verdict, result)
        if verdict.accepted:
            text += (
                f"; a person resolves it (turnkeeper gate resolve {channel.turn.goal_id} "
                f"{call.gate_id} ...); work it blocks waits until then"
            )
        return text + "\n"

    def request_effect(self, provider: str, request: dict[str, JsonValue] | None = None) -> str:
        channel = attach(self._env)
        _require_text("provider", provider)
        found = json_problem(request or {})
        if found is not None:
            reason, message, where = found
            field = ".".join(["request", *(str(p) for p in where)])
            raise InvalidArgument(f"{field} {message}", reason=reason, details={"field": field})
        self._journal(
            channel,
            lambda seq, _: RequestEffectCall(
                seq=seq, at=self._clock(), provider=provider, request=request or {}
            ),
        )
        return (
            f"journaled; after the turn's write-back, turnkeeper applies it once through "
            f"`{provider}` if the session's host config lists that provider, else it is "
            "refused (provider_not_authorised)\n"
        )

    # --- the journal -----------------------------------------------------------------

    def _journal(self, channel: Channel, make: _MakeCall) -> tuple[ToolCall, Replay, Verdict]:
        """Number the call, dry-run it after every call before it, journal it (under the
        journal's lock: a second server of the turn waits, and numbers its call next)."""
        goal = self._goal_of(channel)
        with channel.journal() as journal:
            call = make(len(journal.calls), journal.calls)
            calls = [*journal.calls, call]
            # A value the kernel's limits refuse raises here, before the append.
            result = replay(channel.turn, goal, calls, self._clock())
            verdict = result.verdicts[-1]
            if isinstance(verdict.refusal, InvalidArgument):
                # Malformed as made (an empty title, a duplicate id in a list): it could
                # never be accepted, so it is refused now rather than journaled.
                raise verdict.refusal
            journal.append(call)
        return call, result, verdict


def _completion_line(result: Replay, *, output: bool) -> str:
    completion = result.completion
    assert completion is not None
    if completion.refusal is None:
        return "todo_done now: the kernel would accept it."
    return "todo_done now: the kernel would refuse it: " + describe_refusal(
        completion.refusal, result, output=output
    )


def _vision_agent(state: GoalState) -> str:
    """The agent a checkpoint is for when the call names none: the one the goal requires
    (or the one of several that owes one now); else the agent must name it."""
    required = state.goal.agents_requiring_vision
    due = missing_vision_checkpoints(state)
    if len(required) == 1:
        return required[0]
    if len(due) == 1:
        return due[0]
    if not required:
        message = "the goal requires no agent's vision checkpoint: name the agent"
    else:
        message = "the goal requires checkpoints of " + ", ".join(required) + ": name the agent"
    raise InvalidArgument(message, reason="agent_required", details={"field": "agent"})

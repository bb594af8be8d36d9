"""Bounded work: recover a failed or lost turn now, wait out a backoff, or stop and mark the
session crashed (:func:`decide_recovery`); and before every turn, whatever its kind, the
pace the policies allow (:func:`pace_next_turn`): host failures back off as one
sequence, hung turns in a row suspend the session (``hung``), so do lost turns in a row
(``lost_turns``), and a streak of turns that made no progress raises a replan
obligation, then suspends the session. Pure: the caller passes the time."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal, Self

from pydantic import AwareDatetime, Field, model_validator

from turnkeeper.kernel.session._model import KernelModel
from turnkeeper.kernel.session.state import SessionState
from turnkeeper.vocabulary import HostErrorKind

_ALL_ERROR_KINDS: frozenset[HostErrorKind] = frozenset(HostErrorKind)
# Why a session whose turns were lost too many times in a row was suspended.
LOST_TURNS = "lost_turns"


class RecoveryPolicy(KernelModel):
    # Highest attempt number a unit of work may reach through automatic recovery.
    max_attempts: int = Field(default=3, ge=1)
    backoff_base_seconds: float = Field(default=5.0, ge=0)
    backoff_max_seconds: float = Field(default=300.0, ge=0)
    # Host failures in a row (across turns, reset by a completed turn) before giving up.
    max_consecutive_host_failures: int = Field(default=5, ge=1)
    # Failure kinds recovered automatically; the rest wait for an operator.
    auto_recover_error_kinds: frozenset[HostErrorKind] = _ALL_ERROR_KINDS
    # Hung turns in a row (no progress for the silence timeout) before the session is
    # suspended for an operator rather than retried: a host that cannot reach its model
    # or waits on input that never comes hangs again.
    max_consecutive_hangs: int = Field(default=2, ge=1)
    # Lost turns in a row before the session is suspended (reason ``lost_turns``) rather
    # than continued: a lost turn spends no attempt (its controller died, not its host),
    # so without a bound a turn that is lost every time — a controller that cannot keep
    # its lease, an agent that takes its worker down — would be retried forever. Set
    # above the restarts in a row one turn meets in a rough deployment (the chaos
    # harness kills a run up to six times back to back, and its goals must close).
    max_consecutive_lost: int = Field(default=8, ge=1)

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.backoff_max_seconds < self.backoff_base_seconds:
            raise ValueError("backoff_max_seconds must be >= backoff_base_seconds")
        return self


class ProgressPolicy(KernelModel):
    """The progress guard: how many completed turns in a row may change nothing in the
    goal before a replan obligation is raised, and how many replan turns may then change
    nothing before the session is suspended (``no_progress``)."""

    max_turns_without_progress: int = Field(default=3, ge=1, le=1_000_000)
    max_replans_without_progress: int = Field(default=2, ge=1, le=1_000_000)


# What the policy says to do about a pending recovery (not the recovery report's
# RecoveryAction, which records what a restart did).
RecoveryChoice = Literal["none", "recover_now", "wait", "crash", "suspend"]


class RecoveryDecision(KernelModel):
    action: RecoveryChoice
    reason: str
    turn_id: str | None = None
    not_before: AwareDatetime | None = None


def backoff_delay(policy: RecoveryPolicy, consecutive_failures: int) -> timedelta:
    """Exponential backoff on host failures in a row; a lost turn (a restart, not a
    host failure) does not raise the count, so its continuation is not delayed."""
    if consecutive_failures <= 0 or policy.backoff_base_seconds == 0:
        return timedelta(0)
    exponent = min(consecutive_failures - 1, 32)  # cap: 2**32 already exceeds any max
    seconds = min(policy.backoff_base_seconds * 2**exponent, policy.backoff_max_seconds)
    return timedelta(seconds=seconds)


def too_many_hangs(session: SessionState, policy: RecoveryPolicy) -> bool:
    """Whether the session's hung turns in a row reached the policy's bound: checked
    before the host failures' bound, so a session stopped by hangs says so."""
    return session.consecutive_hangs >= policy.max_consecutive_hangs


def too_many_lost(session: SessionState, policy: RecoveryPolicy) -> bool:
    """Whether the session's lost turns in a row reached the policy's bound."""
    return session.consecutive_lost >= policy.max_consecutive_lost


def decide_recovery(
    session: SessionState, policy: RecoveryPolicy, now: datetime
) -> RecoveryDecision:
    """What to do about the session's pending recovery at ``now``.

    ``crash`` asks the runtime to mark the session crashed, ``suspend`` (reason
    ``hung``) to suspend it (a ``SetStatus`` command); the decision itself writes nothing.
    """
    if session.status in ("closed", "crashed", "suspended"):
        return RecoveryDecision(action="none", reason=f"session_{session.status}")
    if too_many_hangs(session, policy):
        turn_id = session.recovery.turn_id if session.recovery is not None else None
        return RecoveryDecision(action="suspend", reason="hung", turn_id=turn_id)
    if too_many_lost(session, policy):
        turn_id = session.recovery.turn_id if session.recovery is not None else None
        return RecoveryDecision(action="suspend", reason=LOST_TURNS, turn_id=turn_id)
    failures = session.consecutive_host_failures
    if failures > policy.max_consecutive_host_failures:
        return RecoveryDecision(action="crash", reason="consecutive_host_failures")
    pending = session.recovery
    if pending is None:
        return RecoveryDecision(action="none", reason="nothing_to_recover")
    if session.in_flight is not None:
        return RecoveryDecision(action="none", reason="turn_in_flight", turn_id=pending.turn_id)
    # A turn lost to a control-plane restart is not the host's fault: only host
    # failures spend attempts, so back-to-back controller kills never crash a session.
    if pending.cause == "failed" and pending.attempt >= policy.max_attempts:
        return RecoveryDecision(
            action="crash", reason="recovery_attempts_exhausted", turn_id=pending.turn_id
        )
    if pending.error_kind is not None and pending.error_kind not in policy.auto_recover_error_kinds:
        return RecoveryDecision(
            action="crash", reason="error_kind_not_auto_recovered", turn_id=pending.turn_id
        )
    not_before = pending.since + backoff_delay(policy, failures)
    if now < not_before:
        return RecoveryDecision(
            action="wait", reason="backoff", turn_id=pending.turn_id, not_before=not_before
        )
    # The runtime's next step: resolve the host recovery record, or accept the
    # continuation that the resolution (or the proven loss) already specified.
    step = (
        "resolve_host_recovery"
        if pending.status == "awaiting_resolution"
        else "accept_continuation"
    )
    return RecoveryDecision(action="recover_now", reason=step, turn_id=pending.turn_id)


PaceAction = Literal["go", "wait", "raise_replan", "suspend", "crash"]


class PaceDecision(KernelModel):
    action: PaceAction
    reason: str
    not_before: AwareDatetime | None = None


def pace_next_turn(
    session: SessionState,
    recovery: RecoveryPolicy,
    progress: ProgressPolicy,
    now: datetime,
    *,
    no_progress_reported: bool,
) -> PaceDecision:
    """Whether the session may start its next turn now, whatever kind the planner picks.

    Every bound lives here so no kind of turn escapes one: host failures in a row end
    the session (``crash``) past the policy's limit and back off exponentially until
    then — measured from the failed turn's end, for fresh turns and replans as much as
    for continuations; a streak of idle turns first asks for a replan
    (``raise_replan``: the caller reports it to the goal, which raises the obligation)
    and, if the replans are idle too, or the streak outlasts both allowances, stops
    the session (``suspend``, reason ``no_progress``). Hung turns in a row past the
    policy's bound suspend it too (reason ``hung``), and so do lost turns in a row
    (reason ``lost_turns``). ``no_progress_reported`` says
    whether the goal already has this streak's obligation (open or discharged).
    """
    if too_many_hangs(session, recovery):
        return PaceDecision(action="suspend", reason="hung")
    if too_many_lost(session, recovery):
        return PaceDecision(action="suspend", reason=LOST_TURNS)
    failures = session.consecutive_host_failures
    if failures > recovery.max_consecutive_host_failures:
        return PaceDecision(action="crash", reason="consecutive_host_failures")
    end = session.last_turn_end
    if failures > 0 and end is not None and end.outcome == "failed":
        not_before = end.at + backoff_delay(recovery, failures)
        if now < not_before:
            return PaceDecision(action="wait", reason="host_failure_backoff", not_before=not_before)
    idle = session.turns_without_progress
    allowed = progress.max_turns_without_progress + progress.max_replans_without_progress
    if session.replans_without_progress >= progress.max_replans_without_progress or idle >= allowed:
        return PaceDecision(action="suspend", reason="no_progress")
    if idle >= progress.max_turns_without_progress and not no_progress_reported:
        return PaceDecision(action="raise_replan", reason="no_progress")
    return PaceDecision(action="go", reason="within_policy")

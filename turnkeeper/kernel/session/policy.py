"""Bounded automatic recovery: recover a failed or lost turn now, wait out a backoff, or
stop and mark the session crashed. Pure: the caller passes the time."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal, Self

from pydantic import AwareDatetime, Field, model_validator

from turnkeeper.kernel.session._model import KernelModel
from turnkeeper.kernel.session.records import HostErrorKind
from turnkeeper.kernel.session.state import SessionState

_ALL_ERROR_KINDS: frozenset[HostErrorKind] = frozenset(
    {"signal", "exit_code", "timeout", "protocol", "spawn", "lost"}
)


class RecoveryPolicy(KernelModel):
    # Highest attempt number a unit of work may reach through automatic recovery.
    max_attempts: int = Field(default=3, ge=1)
    backoff_base_seconds: float = Field(default=5.0, ge=0)
    backoff_max_seconds: float = Field(default=300.0, ge=0)
    # Host failures in a row (across turns, reset by a completed turn) before giving up.
    max_consecutive_host_failures: int = Field(default=5, ge=1)
    # Failure kinds recovered automatically; the rest wait for an operator.
    auto_recover_error_kinds: frozenset[HostErrorKind] = _ALL_ERROR_KINDS

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.backoff_max_seconds < self.backoff_base_seconds:
            raise ValueError("backoff_max_seconds must be >= backoff_base_seconds")
        return self


RecoveryAction = Literal["none", "recover_now", "wait", "crash"]


class RecoveryDecision(KernelModel):
    action: RecoveryAction
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


def decide_recovery(
    session: SessionState, policy: RecoveryPolicy, now: datetime
) -> RecoveryDecision:
    """What to do about the session's pending recovery at ``now``.

    ``crash`` asks the runtime to mark the session crashed (a ``SetStatus`` command);
    the decision itself writes nothing.
    """
    if session.status in ("closed", "crashed", "suspended"):
        return RecoveryDecision(action="none", reason=f"session_{session.status}")
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

"""From a host's outcome to what the turn's receipt may hold: bounded, then validated.

Whichever host ran the turn, the driver applies both before the receipt is
written: a result too large for the durable receipt, or one the result model
(runtime/turn/agent_result.py) refuses, fails the turn with error kind ``protocol``
and a message that says why, so the receipt records the refusal and nothing is
written back.
"""

from __future__ import annotations

from turnkeeper.hosts import HostErrorKind, HostOutcome, HostStatus
from turnkeeper.hosts.base import TurnLimits
from turnkeeper.hosts.output_cap import oversized_result
from turnkeeper.runtime.turn.agent_result import AgentResult, MalformedResult, parse_result


def failed_protocol(outcome: HostOutcome, message: str) -> HostOutcome:
    """``outcome`` as a ``protocol`` failure with ``message``, its result dropped."""
    failed = outcome.model_dump() | {
        "status": HostStatus.FAILED,
        "error_kind": HostErrorKind.PROTOCOL,
        "message": message,
        "result": {},
    }
    return HostOutcome.model_validate(failed)


def bounded_result(outcome: HostOutcome, limits: TurnLimits) -> HostOutcome:
    """A result too large for the durable receipt fails the turn (``protocol``),
    whichever host returned it."""
    if outcome.status is not HostStatus.SUCCEEDED:
        return outcome
    why = oversized_result(outcome.result, limits)
    return outcome if why is None else failed_protocol(outcome, why)


def checked_result(outcome: HostOutcome) -> tuple[HostOutcome, AgentResult | None]:
    """A succeeded outcome's result through the result model, once, before the
    receipt: the outcome and the typed result, or — when the model refuses it — the
    outcome as a ``protocol`` failure whose message names the field, and None."""
    if outcome.status is not HostStatus.SUCCEEDED:
        return outcome, None
    try:
        return outcome, parse_result(outcome.result)
    except MalformedResult as error:
        return failed_protocol(outcome, error.message), None


def artifact_digest(result: AgentResult | None) -> str | None:
    """The digest of the host session artifact (an agent CLI's session file) the host
    reported, recorded in the turn's snapshot so a later revert can check its copy."""
    artifact = result.host_artifact if result is not None else None
    return artifact.sha256 if artifact is not None else None


def artifact_path(result: AgentResult | None) -> str | None:
    artifact = result.host_artifact if result is not None else None
    return artifact.path if artifact is not None else None


# How much of the host's last stderr line a failure's message carries.
STDERR_REASON_CHARS = 500


def failure_reason(outcome: HostOutcome) -> str:
    """Why a host step failed, as the receipt records it: the host's message and, for a
    bare exit code, the last line the host wrote to stderr ("host exited with code 3"
    alone names no cause; the agent's own "cannot reach the model" does)."""
    message = outcome.message or (outcome.error_kind.value if outcome.error_kind else "failed")
    if outcome.error_kind is None or outcome.error_kind.value != "exit_code":
        return message
    tail = [line.strip() for line in outcome.stderr_tail.splitlines() if line.strip()]
    if not tail or tail[-1] in message:
        return message
    return f"{message}; stderr: {tail[-1][:STDERR_REASON_CHARS]}"

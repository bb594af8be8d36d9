"""Decision rules for what the goal watches and decides on: gates, monitors, evidence."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from turnkeeper.errors import AlreadyExists, FailedPrecondition, InvalidArgument
from turnkeeper.kernel._guards import lookup, require_not_future, require_text, require_unique
from turnkeeper.kernel.events import (
    EvidenceRecorded,
    GateOpened,
    GateResolved,
    GoalEvent,
    MonitorAdded,
    MonitorRetired,
    ReadbackRecorded,
)
from turnkeeper.kernel.model import GateResolution, GateStatus, GoalState
from turnkeeper.kernel.proposals import (
    AddMonitor,
    OpenGate,
    RecordEvidence,
    RecordReadback,
    ResolveGate,
    RetireMonitor,
)


def open_gate(state: GoalState, p: OpenGate, now: datetime) -> list[GoalEvent]:
    require_text("gate_id", p.gate_id)
    require_text("title", p.title)
    _require_new(state.gates, "gate", p.gate_id)
    require_unique("scope", p.scope)
    for todo_id in p.scope:
        lookup(state.todos, "todo", todo_id)
    return [
        GateOpened(gate_id=p.gate_id, title=p.title, blocking=p.blocking, scope=p.scope, at=now)
    ]


def resolve_gate(state: GoalState, p: ResolveGate, now: datetime) -> list[GoalEvent]:
    gate = lookup(state.gates, "gate", p.gate_id)
    require_text("by", p.by)
    require_text("decision", p.decision)
    if gate.status is GateStatus.RESOLVED:
        raise FailedPrecondition(
            f"gate {gate.id!r} is already resolved",
            reason="gate_already_resolved",
            details={"gate_id": gate.id},
        )
    resolution = GateResolution(by=p.by, decision=p.decision, payload=p.payload, at=now)
    return [GateResolved(gate_id=gate.id, resolution=resolution, at=now)]


def add_monitor(state: GoalState, p: AddMonitor, now: datetime) -> list[GoalEvent]:
    require_text("monitor_id", p.monitor_id)
    require_text("target", p.target)
    _require_new(state.monitors, "monitor", p.monitor_id)
    _require_positive("cadence_seconds", p.cadence_seconds)
    if p.stall_limit < 0:
        raise InvalidArgument(
            "stall_limit must not be negative",
            reason="negative_value",
            details={"field": "stall_limit", "value": p.stall_limit},
        )
    if p.freshness_seconds is not None:
        _require_positive("freshness_seconds", p.freshness_seconds)
    elif p.required:
        raise InvalidArgument(
            "a required monitor needs freshness_seconds",
            reason="freshness_required",
            details={"monitor_id": p.monitor_id},
        )
    return [
        MonitorAdded(
            monitor_id=p.monitor_id,
            target=p.target,
            cadence_seconds=p.cadence_seconds,
            stall_limit=p.stall_limit,
            required=p.required,
            freshness_seconds=p.freshness_seconds,
            next_due=now,
            at=now,
        )
    ]


def record_readback(state: GoalState, p: RecordReadback, now: datetime) -> list[GoalEvent]:
    monitor = lookup(state.monitors, "monitor", p.monitor_id)
    observed_at = p.at or now
    require_not_future("at", observed_at, now)
    if monitor.retired:
        raise FailedPrecondition(
            f"monitor {monitor.id!r} is retired",
            reason="monitor_retired",
            details={"monitor_id": monitor.id},
        )
    last = monitor.last_readback
    if last is not None and observed_at < last.at:
        # An older observation would rewind the streak and the due time.
        raise FailedPrecondition(
            "readback is older than the last one",
            reason="readback_out_of_order",
            details={"monitor_id": monitor.id, "last_at": last.at.isoformat()},
        )
    return [ReadbackRecorded(monitor_id=monitor.id, value=p.value, observed_at=observed_at, at=now)]


def retire_monitor(state: GoalState, p: RetireMonitor, now: datetime) -> list[GoalEvent]:
    monitor = lookup(state.monitors, "monitor", p.monitor_id)
    require_text("reason", p.reason)
    if monitor.retired:
        raise FailedPrecondition(
            f"monitor {monitor.id!r} is already retired",
            reason="monitor_retired",
            details={"monitor_id": monitor.id},
        )
    return [MonitorRetired(monitor_id=monitor.id, reason=p.reason, at=now)]


def record_evidence(state: GoalState, p: RecordEvidence, now: datetime) -> list[GoalEvent]:
    require_text("evidence_id", p.evidence_id)
    require_text("command", p.command)
    key = p.command if p.key is None else p.key
    require_text("key", key)
    _require_new(state.evidence, "evidence", p.evidence_id)
    _require_positive("freshness_seconds", p.freshness_seconds)
    recorded_at = p.recorded_at or now
    require_not_future("recorded_at", recorded_at, now)
    return [
        EvidenceRecorded(
            evidence_id=p.evidence_id,
            key=key,
            command=p.command,
            revision=p.revision,
            tree=p.tree,
            exit_code=p.exit_code,
            output_digest=p.output_digest,
            output_tail=p.output_tail,
            recorded_at=recorded_at,
            freshness_seconds=p.freshness_seconds,
            at=now,
        )
    ]


def _require_new(table: Mapping[str, object], entity: str, key: str) -> None:
    if key in table:
        raise AlreadyExists(
            f"{entity} {key!r} already exists", reason=f"{entity}_exists", details={"id": key}
        )


def _require_positive(field: str, value: int) -> None:
    if value <= 0:
        raise InvalidArgument(
            f"{field} must be positive",
            reason="non_positive_value",
            details={"field": field, "value": value},
        )

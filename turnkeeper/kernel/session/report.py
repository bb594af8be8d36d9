"""The recovery report: what a restart replayed from the log, what it probed again, and
what it did (docs/design.md, "Replayed or probed again")."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field

from turnkeeper.host_reports import ProcessIdentity
from turnkeeper.kernel.session._model import Id, KernelModel, ShortText

# Lists are capped so a report, which the session state keeps, stays bounded in size.
_MAX_ITEMS = 256


class ReplayedFacts(KernelModel):
    """Facts taken from the durable log: they prove the past, not the present."""

    goal_id: Id
    todo_lineage: tuple[Id, ...] = Field(default=(), max_length=_MAX_ITEMS)
    gate_resolutions: tuple[Id, ...] = Field(default=(), max_length=_MAX_ITEMS)
    receipts: tuple[Id, ...] = Field(default=(), max_length=_MAX_ITEMS)


class ProcessProbe(KernelModel):
    process: ProcessIdentity
    alive: bool


class ProbedFacts(KernelModel):
    """Facts observed again at restart, because an old record cannot vouch for them."""

    probed_at: AwareDatetime
    workspace_revision: Id | None
    workspace_dirty: bool
    dirty_diff_summary: ShortText = ""
    host_processes: tuple[ProcessProbe, ...] = Field(default=(), max_length=_MAX_ITEMS)
    due_monitors: tuple[Id, ...] = Field(default=(), max_length=_MAX_ITEMS)


RecoveryActionKind = Literal[
    "killed_process",
    "turn_marked_lost",
    "receipt_written_back",
    "effects_resolved",
    "continuation_queued",
    "reattached",
    "nothing_to_do",
]


class RecoveryAction(KernelModel):
    kind: RecoveryActionKind
    at: AwareDatetime
    turn_id: Id | None = None
    pids: tuple[int, ...] = Field(default=(), max_length=_MAX_ITEMS)
    detail: ShortText = ""


class RecoveryReport(KernelModel):
    started_at: AwareDatetime
    finished_at: AwareDatetime
    replayed: ReplayedFacts
    probed: ProbedFacts
    actions: tuple[RecoveryAction, ...] = Field(default=(), max_length=_MAX_ITEMS)

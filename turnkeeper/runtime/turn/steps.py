"""The turn transaction, declared once: every step of a turn, and what restart does.

A turn is one bounded piece of an agent's work. It goes through the steps of
:data:`TURN_STEPS` in order, each recorded before the next begins, so a control
plane killed anywhere leaves a log that says exactly how far the turn got. Read
this module first; each step names the code that performs it.

**The steps.** The driver (``runtime/turn/driver.py``) claims the turn's todo and
accepts the turn in one durable commit (``TurnCommits.intent``, in
``runtime/turn/commits.py``); only then does it start the host, with the turn id in
the host's environment so every process of the turn carries that marker. The host's
start (its process identity) and its events are journaled as the pump reads them
(``runtime/turn/event_pump.py``, ``runtime/turn/host_journal.py``) in cheap,
batched commits that skip the fsync: the start rides on the turn's next write to the
session. The receipt — the host's result, or its failure with a host recovery
record — is the turn's second durable commit. A successful result is then written
back through the goal kernel (``runtime/turn/writeback.py``) together with
``turn.written_back``; each effect the result asked for is intended, read back,
applied only after a provable "not applied", and resolved
(``runtime/turn/effects.py``); last, the workspace is snapshotted and
``turn.completed`` committed. A result that needs no outside work (no effect, no
evidence to run again) commits receipt, write-back and completion at once
(``TurnCommits.outcome``): the turn then costs two fsyncs.

**The crash points.** Each step ends at a named crash point
(``turnkeeper/crashpoints.py``): a test or the chaos harness (``turnkeeper_chaos/``)
SIGKILLs the real process there. Each effect passes its three points once; a host
start that rides on the receipt or the completion passes ``host.started`` just
before that step's own point.

**Recovery.** A restarted control plane takes each session's lease and applies the
recovery table (:data:`RECOVERY_TABLE`, applied by ``runtime/control/recovery.py``)
to the turn left in flight. Each row names the turn's phase it applies to (the
``TurnPhase`` the log's last durable step left) and the actions the session's
recovery report records (``RecoveryActionKind``). A step's ``recovery`` lists the
rows that may apply after a crash at its point: a host kept by a live runner
(``runtime/turn/runner_link.py``, ``turnkeeper/runner/``) is reattached, else the
turn is lost and continued. A failure receipt ends the turn in the same commit
(``turn.failed``): nothing is left in flight, and the failed turn's host recovery
record is resolved under the bounded policy, not by this table. Recovery has crash
points of its own (:data:`RECOVERY_STEPS`).

``docs/design.md`` shows both tables as ``runtime/turn/steps_doc.py`` renders them;
``tests/runtime/test_turn_steps.py`` fails when the driver's crash points, the commit
methods, ``crashpoints.py``, the recovery code or that document disagree with this
module.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnkeeper.kernel.session import TurnPhase
from turnkeeper.kernel.session.report import RecoveryActionKind


@dataclass(frozen=True)
class RecoveryRow:
    """One row of the recovery table: what restart does with the turn left in flight."""

    name: str
    # The log's last durable step, as the table says it.
    last_durable: str
    # The in-flight phases the row applies to (None: no turn in flight).
    phases: tuple[TurnPhase | None, ...]
    on_restart: str
    # What the recovery report records, in order (some only when they happened: a
    # kill only when a process was found, effects only when some were open).
    actions: tuple[RecoveryActionKind, ...]


@dataclass(frozen=True)
class TurnStep:
    """One step of the turn transaction."""

    name: str
    # What the step writes (session events by their type; goal events named as such).
    writes: str
    # The commit that writes it, as ``Class.method`` (more than one: the step rides on
    # whichever comes first); empty: nothing is written.
    commits: tuple[str, ...]
    # Whether that commit is on disk before the step's crash point (group commit's
    # fsync); a cheap commit is durable only when a runner keeps the host.
    durable: bool
    # Its crash point (``turnkeeper/crashpoints.py``) and the modules that hit it.
    crash_point: str
    hit_in: tuple[str, ...]
    # The in-flight phase a crash at the point leaves (None: the turn has ended). A
    # host start that rode on a later step's commit leaves what that step leaves.
    leaves: TurnPhase | None
    # The recovery table's rows that may apply after a crash here, by name.
    recovery: tuple[str, ...]


@dataclass(frozen=True)
class RecoveryStep:
    """A step of restart recovery itself, which can be killed too."""

    name: str
    writes: str
    crash_point: str
    hit_in: tuple[str, ...]


DRIVER = "runtime/turn/driver.py"
HOST_JOURNAL = "runtime/turn/host_journal.py"
EFFECTS = "runtime/turn/effects.py"
RECOVERY = "runtime/control/recovery.py"

_LIVE = (TurnPhase.ACCEPTED, TurnPhase.HOST_STARTED)
_EFFECTS_OPEN = (TurnPhase.WRITTEN_BACK, TurnPhase.EFFECTS)
_LOST: tuple[RecoveryActionKind, ...] = (
    "killed_process",
    "turn_marked_lost",
    "continuation_queued",
)

RECOVERY_TABLE: tuple[RecoveryRow, ...] = (
    RecoveryRow(
        name="reattach",
        last_durable="accepted or host started, the host kept by a live runner",
        phases=_LIVE,
        on_restart=(
            "reattach: read the host's events after the last journaled one from the "
            "runner, then finish the turn as usual (receipt, write-back, effects, "
            "completion); not lost, no continuation"
        ),
        actions=("reattached",),
    ),
    RecoveryRow(
        name="lost_unstarted",
        last_durable="accepted, no host identity",
        phases=(TurnPhase.ACCEPTED,),
        on_restart=(
            "end every process carrying the turn's marker; the turn is lost; continue "
            "with a continuation turn"
        ),
        actions=_LOST,
    ),
    RecoveryRow(
        name="lost_started",
        last_durable="host started, no receipt",
        phases=(TurnPhase.HOST_STARTED,),
        on_restart=(
            "prove the host gone or end its whole tree; record `lost_on_restore`; "
            "continue with a continuation turn that resumes the agent's session and "
            "tells it to reconcile"
        ),
        actions=_LOST,
    ),
    RecoveryRow(
        name="write_back",
        last_durable="receipt, not written back",
        phases=(TurnPhase.RECEIPT,),
        on_restart=(
            "write back from the durable receipt (the host does not run again), then "
            "effects and completion"
        ),
        actions=("receipt_written_back", "effects_resolved"),
    ),
    RecoveryRow(
        name="effects_open",
        last_durable="written back, effects open",
        phases=_EFFECTS_OPEN,
        on_restart=(
            "read each open effect back; apply only what the provider proves was not "
            "applied, else `indeterminate` (and a blocking gate); then complete the turn"
        ),
        actions=("receipt_written_back", "effects_resolved"),
    ),
    RecoveryRow(
        name="complete",
        last_durable="written back, no effect open",
        phases=(TurnPhase.WRITTEN_BACK,),
        on_restart="complete the turn",
        actions=("receipt_written_back",),
    ),
    RecoveryRow(
        name="nothing",
        last_durable="completed, or nothing in flight",
        phases=(None,),
        on_restart="nothing",
        actions=("nothing_to_do",),
    ),
)

_WHILE_LIVE = ("reattach",)
TURN_STEPS: tuple[TurnStep, ...] = (
    TurnStep(
        name="accept",
        writes="the todo's claim (goal) and `turn.accepted` with the envelope",
        commits=("TurnCommits.intent",),
        durable=True,
        crash_point="turn.accepted",
        hit_in=(DRIVER,),
        leaves=TurnPhase.ACCEPTED,
        recovery=(*_WHILE_LIVE, "lost_unstarted"),
    ),
    TurnStep(
        name="spawn",
        writes="nothing: the host process runs, its identity not yet journaled",
        commits=(),
        durable=False,
        crash_point="host.spawned",
        hit_in=(DRIVER,),
        leaves=TurnPhase.ACCEPTED,
        recovery=(*_WHILE_LIVE, "lost_unstarted"),
    ),
    TurnStep(
        name="host_started",
        writes=(
            "`turn.host_started` (process identity), with the first events, else the "
            "receipt, else alone after a second of silence"
        ),
        commits=("TurnCommits.session", "TurnCommits.outcome"),
        durable=False,
        crash_point="host.started",
        hit_in=(DRIVER, HOST_JOURNAL),
        leaves=TurnPhase.HOST_STARTED,
        recovery=(*_WHILE_LIVE, "lost_started"),
    ),
    TurnStep(
        name="host_events",
        writes="`turn.host_events`: a batch of the host's events, within the turn's caps",
        commits=("TurnCommits.session",),
        durable=False,
        crash_point="host.events",
        hit_in=(HOST_JOURNAL,),
        leaves=TurnPhase.HOST_STARTED,
        recovery=(*_WHILE_LIVE, "lost_started"),
    ),
    TurnStep(
        name="receipt",
        writes="`turn.receipt_recorded` (and `turn.failed` for a failure receipt)",
        commits=("TurnCommits.session",),
        durable=True,
        crash_point="receipt",
        hit_in=(DRIVER,),
        leaves=TurnPhase.RECEIPT,
        recovery=("write_back",),
    ),
    TurnStep(
        name="write_back",
        writes="the goal's write-back events and `turn.written_back`",
        commits=("TurnCommits.outcome",),
        durable=True,
        crash_point="written_back",
        hit_in=(DRIVER,),
        leaves=TurnPhase.WRITTEN_BACK,
        recovery=("effects_open", "complete"),
    ),
    TurnStep(
        name="effect_intended",
        writes="`turn.effect_intended`: the effect's key, provider and request",
        commits=("SessionService.execute",),
        durable=True,
        crash_point="effect.intended",
        hit_in=(EFFECTS,),
        leaves=TurnPhase.EFFECTS,
        recovery=("effects_open",),
    ),
    TurnStep(
        name="effect_applied",
        writes="nothing: the provider's apply returned, its outcome not yet recorded",
        commits=(),
        durable=False,
        crash_point="effect.applied",
        hit_in=(EFFECTS,),
        leaves=TurnPhase.EFFECTS,
        recovery=("effects_open",),
    ),
    TurnStep(
        name="effect_resolved",
        writes="`turn.effect_resolved`: applied or indeterminate, with the readback",
        commits=("SessionService.execute",),
        durable=True,
        crash_point="effect.resolved",
        hit_in=(EFFECTS,),
        leaves=TurnPhase.EFFECTS,
        recovery=("effects_open",),
    ),
    TurnStep(
        name="complete",
        writes=(
            "`turn.completed` with the snapshot; for a result that needs no outside "
            "work, together with the receipt and the write-back"
        ),
        commits=("TurnCommits.complete", "TurnCommits.outcome"),
        durable=True,
        crash_point="completed",
        hit_in=(DRIVER,),
        leaves=None,
        recovery=("nothing",),
    ),
)

RECOVERY_STEPS: tuple[RecoveryStep, ...] = (
    RecoveryStep(
        name="killed",
        writes="nothing: the lost turn's surviving processes ended",
        crash_point="recovery.killed",
        hit_in=(RECOVERY,),
    ),
    RecoveryStep(
        name="lost",
        writes="`turn.lost` with the proof of its processes' end",
        crash_point="recovery.lost",
        hit_in=(RECOVERY,),
    ),
    RecoveryStep(
        name="reported",
        writes="`session.recovery_reported`: what was replayed, probed and done",
        crash_point="recovery.reported",
        hit_in=(RECOVERY,),
    ),
)


def turn_points() -> tuple[str, ...]:
    """The turn's crash points, in the order a turn reaches them."""
    return tuple(step.crash_point for step in TURN_STEPS)


def recovery_points() -> tuple[str, ...]:
    """Restart recovery's crash points, in order."""
    return tuple(step.crash_point for step in RECOVERY_STEPS)


def recovery_row(name: str) -> RecoveryRow:
    """The recovery table's row called ``name``."""
    for row in RECOVERY_TABLE:
        if row.name == name:
            return row
    raise KeyError(name)

"""Restart recovery: the recovery table, applied to one session.

The table — which phase of the turn in flight gets which treatment, and what the
recovery report records for it — is declared in runtime/turn/steps.py
(``RECOVERY_TABLE``) and shown in docs/design.md: a turn a live runner still has is
reattached; an accepted or started turn without a receipt is lost (its processes
ended) and continued; a receipt is written back; open effects are read back; then
the turn completes.

Also: a failed turn whose recovery record was never resolved (the controller
died between the receipt and the resolution) is resolved from the record read
back from the log, under the bounded policy.

What was replayed from the log, what was probed again, and what was done is
recorded as the session's recovery report.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import JsonValue

from turnkeeper.crashpoints import crash_point
from turnkeeper.errors import FailedPrecondition
from turnkeeper.hosts import process_tree
from turnkeeper.kernel import audit
from turnkeeper.kernel.limits import TITLE_MAX_CHARS
from turnkeeper.kernel.session import (
    LeaseToken,
    RecordRecoveryReport,
    RecordTurnLost,
    ResolveHostRecovery,
    SessionState,
)
from turnkeeper.kernel.session.records import LossProof, ReceiptFailure
from turnkeeper.kernel.session.recovery import resolve_host_recovery
from turnkeeper.kernel.session.report import (
    ProbedFacts,
    ProcessProbe,
    RecoveryAction,
    RecoveryReport,
    ReplayedFacts,
)
from turnkeeper.runtime.control.controller_identity import can_probe
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.turn.driver import TurnDriver
from turnkeeper.runtime.turn.runner_link import Reattached, RunnerLink
from turnkeeper.runtime.workspaces.snapshots import artifact_path
from turnkeeper.runtime.workspaces.workspace import probe_workspace


def host_session_lost(session: SessionState) -> bool:
    """Whether the bound host session left nothing to resume: its artifact (an agent
    CLI's transcript) is not there and no completed turn ever recorded it — Claude Code
    SIGKILLed before it first flushed its transcript. A missing artifact that a
    completed turn did record is damage instead: crash detection and revert handle it.
    Hosts without an artifact (subprocess, python) resume as before."""
    handle = session.host_session_handle
    if handle is None:
        return False
    workspace = Path(session.workspace)
    path = artifact_path(session.host_kind, session.host_config, handle, workspace)
    if path is None or path.exists():
        return False
    done = session.last_completed
    recorded = done.snapshot.host_artifact_path if done is not None else None
    return recorded is None or Path(recorded).resolve() != path.resolve()


class SessionRecovery:
    def __init__(
        self,
        sessions: SessionService,
        goals: GoalService,
        driver: TurnDriver,
        token: Callable[[str], LeaseToken],
        runner: RunnerLink | None = None,
    ):
        self._sessions = sessions
        self._goals = goals
        self._driver = driver
        self._token = token
        self._runner = runner
        # Turns found running in the runner, by session: the controller finishes each
        # (TurnDriver.continue_reattached) before the session's next turn.
        self.reattached: dict[str, Reattached] = {}

    def recover(self, session_id: str, previous_owner: str | None = None) -> RecoveryReport:
        """Apply the recovery table to the session whose lease this controller just
        took; ``previous_owner``: who held the lease before (None: this controller, or
        not known), whose hosts a lost turn's proof must account for."""
        started = self._sessions.now()
        session = self._sessions.load(session_id)
        actions: list[RecoveryAction] = []
        probes: list[ProcessProbe] = []
        turn = session.in_flight
        if turn is not None:
            attached = self._runner.reattach(session) if self._runner is not None else None
            if attached is not None:
                self.reattached[session_id] = attached
                detail = f"reattached at seq {attached.after_seq}"
                actions.append(self._action("reattached", turn.envelope.turn_id, detail=detail))
            elif turn.phase in ("accepted", "host_started"):
                self._end_lost_turn(session, actions, probes, previous_owner)
            elif turn.receipt is not None:
                effects = self._driver.complete_from_receipt(session, turn.envelope, turn.receipt)
                actions.append(self._action("receipt_written_back", turn.envelope.turn_id))
                if effects.handled:  # written back, effects open: each read back first
                    detail = effects.describe()
                    actions.append(
                        self._action("effects_resolved", turn.envelope.turn_id, detail=detail)
                    )
        if not actions:
            actions.append(self._action("nothing_to_do", None))
        report = self._report(self._sessions.load(session_id), started, actions, probes)
        self._sessions.execute(
            session_id, RecordRecoveryReport(lease=self._token(session_id), report=report)
        )
        crash_point("recovery.reported")
        return report

    def failed_turn_record(self, session_id: str, turn_id: str) -> dict[str, JsonValue]:
        """A failed turn's host recovery record, read back from the durable log."""
        receipt = self._sessions.receipt_event(session_id, turn_id).receipt
        if not isinstance(receipt, ReceiptFailure):
            raise FailedPrecondition(
                f"turn {turn_id} did not fail: it has no host recovery record",
                reason="turn_not_recoverable",
                details={"turn_id": turn_id},
            )
        return receipt.host_recovery.model_dump(mode="json")

    def check_failed_turn(self, session_id: str, turn_id: str) -> None:
        """Raise the typed error resolving would raise, without writing anything.

        Callers that must take the session's lease first (a write) check here
        before, so a refused record leaves the store untouched.
        """
        record = self.failed_turn_record(session_id, turn_id)
        resolve_host_recovery(record, self._sessions.load(session_id))

    def resolve_failed_turn(self, session_id: str, turn_id: str) -> None:
        """Resolve a failed turn's host recovery record, read back from the durable log."""
        record = self.failed_turn_record(session_id, turn_id)
        lost = host_session_lost(self._sessions.load(session_id))
        self._sessions.execute(
            session_id,
            ResolveHostRecovery(
                lease=self._token(session_id), record=record, host_session_lost=lost
            ),
        )

    # --- the lost-turn row of the table -------------------------------------------------

    def _end_lost_turn(
        self,
        session: SessionState,
        actions: list[RecoveryAction],
        probes: list[ProcessProbe],
        previous_owner: str | None,
    ) -> None:
        turn = session.in_flight
        assert turn is not None
        turn_id = turn.envelope.turn_id
        alive = False
        # A holder on another machine, boot or PID namespace: its host's pid means
        # nothing here, so no probe can prove it gone. The takeover waited for the lease
        # and the fencing margin (runtime/turn/fencing.py): the holder ended it itself.
        remote = previous_owner is not None and not can_probe(previous_owner)
        if turn.process is not None and not remote:
            alive = process_tree.is_alive(turn.process)  # still the one we started?
            probes.append(ProcessProbe(process=turn.process, alive=alive))
        # A dead runner's hosts are accounted for first: each ended, or blocked where
        # its pid now names another process (never signalled).
        proven = self._runner.prove_hosts_ended() if self._runner is not None else []
        # The marker search runs whatever the identity says: shell children in their
        # own process sessions outlive the host, and an unrecorded host has no identity.
        killed = process_tree.kill_turn_processes(turn_id)
        pids = tuple(k.pid for k in killed.killed)
        if pids:
            actions.append(self._action("killed_process", turn_id, pids=pids))
        crash_point("recovery.killed")
        if pids:
            ended: Literal["killed", "proven_gone", "fenced"] = "killed"
            seen = "host was alive at restart" if alive else "no live host process at restart"
        elif remote:
            ended = "fenced"
            seen = (
                f"ended by its worker's fencing: {previous_owner} runs where its processes "
                "cannot be seen from here and ends its hosts itself, before its lease runs "
                "out or with its own end; taken over once the lease and the fencing margin "
                "had passed"
            )
        else:
            ended = "proven_gone"
            seen = "no live host process at restart"
        proof = LossProof(
            ended=ended,
            killed_pids=pids[:256],
            process=turn.process,
            detail=(seen + ("; the runner was gone: " + ", ".join(proven) if proven else ""))[
                :TITLE_MAX_CHARS
            ],
        )
        self._sessions.execute(
            session.session_id,
            RecordTurnLost(lease=self._token(session.session_id), turn_id=turn_id, proof=proof),
        )
        # Its span, which the controller that died could not end (runtime/turn/spans.py).
        self._driver.spans.ended_by_recovery(turn, session.session_id, outcome="lost")
        actions.append(self._action("turn_marked_lost", turn_id, detail="lost_on_restore"))
        crash_point("recovery.lost")
        actions.append(self._action("continuation_queued", turn_id))

    # --- the report -----------------------------------------------------------------------

    def _action(
        self, kind: str, turn_id: str | None, pids: tuple[int, ...] = (), detail: str = ""
    ) -> RecoveryAction:
        return RecoveryAction.model_validate(
            {
                "kind": kind,
                "at": self._sessions.now(),
                "turn_id": turn_id,
                "pids": pids,
                "detail": detail,
            }
        )

    def _report(
        self,
        session: SessionState,
        started: datetime,
        actions: list[RecoveryAction],
        probes: list[ProcessProbe],
    ) -> RecoveryReport:
        goal = self._goals.load(session.goal_id)
        now = self._sessions.now()
        workspace = probe_workspace(Path(session.workspace))
        due = audit(goal, now)
        due_monitors = tuple(
            m.id for m in goal.monitors.values() if not m.retired and m.next_due <= now
        )
        # The last receipt in the log. A lost turn has none (it ended without one), so
        # after a turn marked lost this is the last completed turn, not the lost one.
        end = session.last_turn_end
        if end is not None and end.outcome in ("completed", "failed"):
            last: str | None = end.turn_id
        else:
            last = session.last_completed.turn_id if session.last_completed else None
        return RecoveryReport(
            started_at=started,
            finished_at=now,
            replayed=ReplayedFacts(
                goal_id=goal.goal.id,
                todo_lineage=tuple(goal.todos)[:256],
                gate_resolutions=tuple(g.id for g in goal.gates.values() if g.resolution)[:256],
                receipts=(last,) if last else (),
            ),
            probed=ProbedFacts(
                probed_at=now,
                workspace_revision=workspace.revision,
                workspace_dirty=workspace.dirty_files > 0,
                dirty_diff_summary=f"{workspace.dirty_files} changed files"
                if workspace.exists
                else "workspace missing",
                host_processes=tuple(probes),
                due_monitors=due_monitors[:256] if due.due_monitors else (),
            ),
            actions=tuple(actions[:256]),
        )

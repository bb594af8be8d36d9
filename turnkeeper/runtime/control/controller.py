"""The control loop: take the sessions' leases, recover what was in flight, drive turns.

``run`` first applies the recovery table to every session it drives, then runs
turns until each goal passes its terminal audit (and is closed with a structured
no-follow-up), a gate blocks, the turn budget is spent, a policy stops the session
(host failures, no progress: ``kernel/session/policy.py``), an operator takes it
over, or a signal asks it to stop (``runtime/control/stopping.py``).

Every lease the controller holds is renewed for as long as it holds it, so a long
turn on one session never costs another session its lease; a session whose lease
was taken over (``session stop`` from another shell, a controller that outlived its
lease) is dropped from this run, the others go on.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from turnkeeper.errors import Aborted, FailedPrecondition, InvalidArgument, Unavailable
from turnkeeper.extensions.findings import Finding
from turnkeeper.extensions.readiness import HOST_NOT_READY, describe, host_problems
from turnkeeper.hosts import process_tree
from turnkeeper.kernel import GoalState
from turnkeeper.kernel.limits import fit_title
from turnkeeper.kernel.session import (
    LeaseToken,
    NextTurn,
    SessionState,
    Stop,
    decide_recovery,
    pace_next_turn,
    plan_next_turn,
)
from turnkeeper.kernel.session.events import StatusAction
from turnkeeper.runtime.control.controller_identity import controller_owner, owner_is_dead
from turnkeeper.runtime.control.recovery import SessionRecovery
from turnkeeper.runtime.control.run_config import ControllerConfig, RunSummary
from turnkeeper.runtime.control.run_outcome import SessionOutcome, planned_outcome
from turnkeeper.runtime.control.scheduler import SessionThreads, TurnSlots
from turnkeeper.runtime.control.session_checks import (
    artifact_damage,
    no_progress_report,
    no_progress_reported,
)
from turnkeeper.runtime.control.session_leases import SessionLeases
from turnkeeper.runtime.control.session_stops import QUARANTINED, SessionStops
from turnkeeper.runtime.log.streams import heads_read_together
from turnkeeper.runtime.services.extension_settings import (
    EXTENSIONS_STREAM,
    disabled_host_reason,
)
from turnkeeper.runtime.services.goals import GoalService, goal_stream
from turnkeeper.runtime.services.sessions import SessionService, session_stream
from turnkeeper.runtime.services.workspace_claims import check_workspaces_not_ahead
from turnkeeper.runtime.turn.driver import TurnDriver, TurnResult
from turnkeeper.runtime.turn.host_receipts import failure_reason
from turnkeeper.runtime.turn.planning import GoalViews
from turnkeeper.runtime.turn.run_progress import Reporter, RunMonitor, RunRecord
from turnkeeper.runtime.turn.runner_link import Reattached, RunnerWait
from turnkeeper.store.base import EventStore

__all__ = [
    "Controller",
    "ControllerConfig",
    "RunSummary",
    "artifact_damage",
    "controller_owner",
    "owner_is_dead",
]

Progress = Callable[[str], None]
log = logging.getLogger(__name__)
# Sessions recovered at once on restart (threads: the work is probes and commits).
RECOVERY_WORKERS = 8
# Why a session stopped being driven because it changed under this controller.
_TAKEN_FROM_US = frozenset({"stale_lease", "lease_held"})
_CHANGED_UNDER_US = frozenset(
    {"session_suspended", "session_crashed", "session_closed", "session_deleted"}
)


@dataclass(frozen=True)
class _Next:
    """What one step of a session decided: go on, wait until a time, or stop."""

    stop: str | None = None
    reason: str = ""
    not_before: datetime | None = None
    # How the session ended, when it stops (the run's exit code: run_outcome.py).
    outcome: SessionOutcome = SessionOutcome.REQUESTED


_GO_ON = _Next()


class Controller:
    def __init__(
        self,
        store: EventStore,
        config: ControllerConfig | None = None,
        progress: Progress | None = None,
        owner: str | None = None,
        reporter: Reporter | None = None,
    ):
        """``progress`` gets each report as a line of text; ``reporter``, when given,
        gets the structured records instead (runtime/turn/run_progress.py)."""
        self.config = config or ControllerConfig()
        self.sessions = SessionService(store)
        self.goals = GoalService(store)
        self.owner = owner or controller_owner()
        text_only = progress or (lambda _: None)
        self._report: Reporter = reporter or (lambda record: text_only(record.text))
        self._stop = threading.Event()
        self._slots = TurnSlots(self.config.max_concurrent, self.config.max_turns, self._stop)
        # Recoveries at once: probes (git, /proc) and commits overlap, bounded.
        self._recovery_slots = threading.BoundedSemaphore(RECOVERY_WORKERS)
        runner = self.config.runner
        self.driver = TurnDriver(self.sessions, self.goals, self.token, self.config.for_driver())
        self.leases = SessionLeases(
            self.sessions,
            self.owner,
            self.config.lease_seconds,
            self.driver.lease_keeper,
            self._say,
            deadlines=self.driver.lease_deadlines,
        )
        self.recovery = SessionRecovery(
            self.sessions, self.goals, self.driver, self.token, runner=runner
        )
        self._runner_wait = (
            RunnerWait(runner, self.config.runner_wait_seconds) if runner is not None else None
        )
        self.stops = SessionStops(
            self.sessions,
            self.goals,
            self.token,
            self._say,
            close_goal_when_terminal=self.config.close_goal_when_terminal,
        )
        # Running hosts as ``run`` shows them: elapsed time, latest message, silence.
        self.monitor = RunMonitor(self._report, self.config.silence_warning_seconds)
        self.driver.watcher = self.monitor
        self.driver.fence_notice = self._fenced
        # What each session plans on, built again only when the goal or a claim moved.
        self._views = GoalViews()
        # Each session's goal as last read: its head is read with the session's.
        self._goal_of: dict[str, str] = {}
        # Sessions whose agent CLI was found ready in this run, and the host setups
        # (kind and config) found ready: one ``--version`` per setup and run. What is
        # not ready is asked again (a login may have been made since).
        self._hosts_ready: set[str] = set()
        self._ready_setups: set[tuple[str, str]] = set()

    def _say(
        self, sid: str, event: str, text: str, *, named: bool = True, **fields: object
    ) -> None:
        """Report a step of a session (``event`` names it for programs; ``named``
        starts the line with the session)."""
        shown = f"session {sid[:8]}: {text}" if named else text
        self._report(RunRecord("session", shown, sid, {"event": event, **fields}))

    def _fenced(self, sid: str, turn_id: str, why: str) -> None:
        self._say(sid, "fenced", f"turn {turn_id}: {why}", turn=turn_id)

    def token(self, session_id: str) -> LeaseToken:
        return self.leases.token(session_id)

    def request_stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # --- leases (runtime/control/session_leases.py) ------------------------------------------

    def acquire(
        self,
        session_id: str,
        purpose: Literal["work", "delete"] = "work",
        *,
        take_over_live: str | None = None,
    ) -> LeaseToken:
        return self.leases.acquire(session_id, purpose, take_over_live=take_over_live)

    def release(self, session_id: str) -> None:
        self.leases.release(session_id)

    def forget(self, session_id: str) -> None:
        self.leases.forget(session_id)

    def release_all(self) -> None:
        self.leases.release_all()

    def report(self, record: RunRecord) -> None:
        self._report(record)

    @property
    def turns_started(self) -> int:
        return self._slots.started

    def drive_shared(self, sid: str, summary: RunSummary) -> None:
        """Drive one session as one of several workers (runtime/control/worker.py): a session
        another live worker holds is left alone without a word, its lease is given back
        as soon as it stops, and ``UNAVAILABLE`` reaches the caller, which backs off."""
        session = self.sessions.load(sid)
        check_workspaces_not_ahead(self.sessions.store, [session])
        try:
            self.acquire(sid)
        except Aborted as held:
            # Claimed by another worker between its scan and ours; ``stale_lease``: two
            # workers took a dead one's lease over at once and the other won.
            if held.reason in ("lease_held", "stale_lease"):
                return
            raise
        except FailedPrecondition as changed:
            if changed.reason in _CHANGED_UNDER_US:
                return  # closed (or suspended, ...) by another since our scan saw it
            raise
        try:
            report = self.recovery.recover(sid, previous_owner=session.lease.owner)
            actions = [a.kind for a in report.actions]
            self._say(sid, "recovered", f"recovered ({', '.join(actions)})", actions=actions)
            self._drive_turns(sid, summary)
        except BaseException:
            self.forget(sid)
            raise
        self.release(sid)

    # --- the loop --------------------------------------------------------------------

    def run(self, session_ids: list[str] | None = None) -> RunSummary:
        """Drive every session (``session_ids``, default: every ready or running one)
        until each stops; a session's turns run in order, different sessions' at once.

        Each session first gets its lease and the recovery table, then its turns: after
        a restart, a recovered session's next turn does not wait for the others'
        recovery. A session that meets an unexpected error stops alone; the first such
        error is raised once every session has stopped."""
        process_tree.become_subreaper()
        every = self.sessions.list()
        ids = session_ids or [s.session_id for s in every if s.status in ("ready", "running")]
        # A database behind what its workspaces' snapshots say it recorded (a lost WAL)
        # would have completed turns run again: refused before anything is driven.
        driven = set(ids)
        check_workspaces_not_ahead(
            self.sessions.store, [s for s in every if s.session_id in driven]
        )
        summary = RunSummary()
        self._slots = TurnSlots(self.config.max_concurrent, self.config.max_turns, self._stop)
        threads = SessionThreads()
        try:
            threads.run_each(ids, lambda sid: self._drive_session(sid, summary))
        finally:
            self.leases.release_all()
        summary.turns = self._slots.started
        if threads.errors:
            raise threads.errors[0]
        return summary

    def _drive_session(self, sid: str, summary: RunSummary) -> None:
        """One session from its lease and recovery to its stop (this thread's whole life).

        The lease is given back as soon as the session stops being driven (it crashed,
        was suspended or blocked, its goal closed), not when the whole run ends: an
        operator's ``session resume`` or ``stop`` on it must not wait for the others."""
        try:
            with self._recovery_slots:
                if not self._recover(sid, summary):
                    return
            self._drive_turns(sid, summary)
        except BaseException as error:
            summary.stop(
                sid, "error", f"{type(error).__name__}: {error}"[:500], SessionOutcome.CRASHED
            )
            raise
        finally:
            self.leases.release(sid)  # a no-op for a lease lost or never taken

    def _drive_turns(self, sid: str, summary: RunSummary) -> None:
        """Steps of one leased, recovered session until it stops."""
        while True:
            # A turn the recovery found running in the runner (at the start, or after
            # a runner that died under a turn was recovered from) is finished first.
            while (attached := self.recovery.reattached.pop(sid, None)) is not None:
                try:
                    self._finish_reattached(sid, attached, summary)
                except Unavailable as gone:  # the runner died under it: as under any turn
                    self._runner_gone(sid, gone)
            if self._stop.is_set():
                summary.stop(sid, "signalled")
                return
            if self._slots.spent():  # the run's turns are all taken: no more steps
                summary.stop(sid, "budget")
                return
            step = self._step_safely(sid, summary)
            if step.stop is not None:
                summary.stop(sid, step.stop, step.reason, step.outcome)
                return
            if step.not_before is not None:
                pause = (step.not_before - self.sessions.now()).total_seconds()
                self._stop.wait(max(pause, 0.0))

    def _finish_reattached(self, sid: str, attached: Reattached, summary: RunSummary) -> None:
        """The turn a runner kept running while no control plane watched: finished
        before anything else of the session (it is not a new turn: no slot, no budget)."""
        session = self.sessions.load(sid)
        turn = session.in_flight
        assert turn is not None
        turn_id = turn.envelope.turn_id
        self._say(
            sid,
            "reattached",
            f"reattached to turn {turn_id} at seq {attached.after_seq}; it runs on",
            turn=turn_id,
            seq=attached.after_seq,
        )
        # The turn began before this ``run`` did: its duration counts from its durable
        # acceptance, not from the reattach.
        already = max(0.0, (self.sessions.now() - turn.accepted_at).total_seconds())
        self.monitor.resuming(turn_id, already)
        began = time.monotonic() - already
        result = self.driver.continue_reattached(session, attached)
        summary.count_reattached()
        self._turn_ended(sid, result, began, summary)

    def _turn_ended(self, sid: str, result: TurnResult, began: float, summary: RunSummary) -> None:
        """Count a turn that ended, and tell the display how."""
        if not result.succeeded:
            summary.count_failure()
        outcome = result.outcome
        self.monitor.turn_ended(
            sid,
            result.turn_id,
            succeeded=result.succeeded,
            error_kind=outcome.error_kind.value if outcome.error_kind else None,
            reason=None if result.succeeded else failure_reason(outcome),
            fallback_seconds=time.monotonic() - began,
        )

    def _recover(self, sid: str, summary: RunSummary) -> bool:
        """Take the session's lease and apply the recovery table; False if another live
        controller holds it (reported, left to it)."""
        previous = self.sessions.load(sid).lease.owner  # whose hosts recovery accounts for
        try:
            self.acquire(sid)
        except Aborted as held:
            if held.reason != "lease_held":
                raise
            owner = str(held.details.get("owner", "?"))
            self._say(sid, "lease_held", f"driven by {owner}; left to it", owner=owner)
            summary.stop(sid, "lease_held", owner)
            return False
        report = self.recovery.recover(sid, previous_owner=previous)
        kinds = ", ".join(a.kind for a in report.actions)
        actions = [a.kind for a in report.actions]
        self._say(sid, "recovered", f"recovered ({kinds})", actions=actions)
        return True

    def _step_safely(self, sid: str, summary: RunSummary) -> _Next:
        """One step; a session taken from us or changed under us stops, the rest go on."""
        try:
            return self._step(sid, summary)
        except Aborted as lost:
            if lost.reason == "lease_expired" and self._reacquire(sid):
                return _GO_ON
            if lost.reason not in (*_TAKEN_FROM_US, "lease_expired"):
                raise
            holder = self.sessions.load(sid).lease.owner or "nobody"
            self.forget(sid)
            self._say(sid, "lease_lost", f"lease lost to {holder}; no longer driven here")
            return _Next(stop="lease_lost", reason=f"{lost.reason}: {holder}")
        except FailedPrecondition as changed:
            if changed.reason not in _CHANGED_UNDER_US:
                raise
            self._say(sid, changed.reason, f"{changed.message}; no longer driven here")
            return _Next(stop=changed.reason.removeprefix("session_"), reason=changed.reason)
        except Unavailable as gone:
            self._runner_gone(sid, gone)
            return _GO_ON

    def _runner_gone(self, sid: str, gone: Unavailable) -> None:
        if gone.reason != "runner_unavailable":
            raise gone
        # The runner died under a running turn: its hosts died with it. The turn is
        # lost on restore, as after a restart, and the session goes on (hosts run
        # here until a runner answers again).
        self._say(sid, "runner_lost", f"the runner is gone ({gone.message}); recovering")
        report = self.recovery.recover(sid)
        actions = [a.kind for a in report.actions]
        self._say(sid, "recovered", f"recovered ({', '.join(actions)})", actions=actions)

    def _wait_for_runner(self, sid: str) -> _Next | None:
        """``--runner require`` and no runner answers: accept no turn, wait for one
        (bounded: ``runner_wait_seconds`` of one outage, then the session stops)."""
        away = self._runner_wait.check(sid) if self._runner_wait is not None else None
        if away is None:
            return None
        hint = "start one: turnkeeper runner start"
        if self._runner_wait is not None and self._runner_wait.exhausted(away):
            why = f"no runner answered for {away.waited_s:.0f}s"
            self._say(sid, "runner_unavailable", f"{why}; stopped ({hint})")
            return _Next(stop="runner_unavailable", reason=why, outcome=SessionOutcome.BLOCKED)
        if away.announce:
            waited = f" ({away.waited_s:.0f}s so far)" if away.waited_s >= 1 else ""
            text = f"waiting for the runner{waited}; no turn starts until one answers ({hint})"
            self._say(sid, "runner_wait", text, waited_seconds=round(away.waited_s, 1))
        return _Next(not_before=self.sessions.now() + timedelta(seconds=RunnerWait.POLL_S))

    def _reacquire(self, sid: str) -> bool:
        """Our lease ran out (a stalled machine) and nobody took it: take it again, and
        recover the session, whose turn may have been cut off mid-transaction."""
        try:
            self.acquire(sid)
        except Aborted:
            return False
        self.recovery.recover(sid)
        self._say(sid, "lease_reacquired", "lease had expired; taken again and recovered")
        return True

    def _step(self, sid: str, summary: RunSummary) -> _Next:
        """Run at most one turn of a session, or say why it waits or stops."""
        # The session, its goal and the project's settings are read as of one moment,
        # their heads confirmed by one query (the goal once the session named it).
        store = self.sessions.store
        goal_id = self._goal_of.get(sid)
        streams = [session_stream(sid), EXTENSIONS_STREAM]
        if goal_id is not None:
            streams.append(goal_stream(goal_id))
        with heads_read_together(store, streams):
            planned = self._plan_step(sid)
        if isinstance(planned, _Next):
            return planned
        session, plan, goal = planned
        waiting = self._wait_for_runner(sid)
        if waiting is not None:
            return waiting
        if not self._slots.take():
            return _Next(stop="signalled" if self._stop.is_set() else "budget")
        began = time.monotonic()
        try:
            on = plan.todo_id or "the goal"
            self._say(
                sid, "turn_planned", f"{plan.kind} turn on {on}", kind=plan.kind, todo=plan.todo_id
            )
            result = self.driver.run_turn(session, plan, goal)
        finally:
            self._slots.give_back()
        self._turn_ended(sid, result, began, summary)
        return _GO_ON

    def _plan_step(self, sid: str) -> _Next | tuple[SessionState, NextTurn, GoalState]:
        """The session's next turn and what it was planned on, or why it waits or stops
        (a recovery resolved, a halt) without a turn."""
        session = self.leases.keep_fresh(self.sessions.load(sid))
        self._goal_of[sid] = session.goal_id
        now = self.sessions.now()
        if session.recovery is not None and session.recovery.status == "awaiting_resolution":
            decision = decide_recovery(session, self.config.policy, now)
            if decision.action == "crash":
                return self._halt(session, "mark_crashed", decision.reason)
            if decision.action == "suspend":  # hung turns in a row: for an operator
                return self._halt(session, "suspend", decision.reason)
            if decision.action == "wait" and decision.not_before is not None:
                return _Next(not_before=decision.not_before)
            if decision.action == "recover_now" and decision.turn_id is not None:
                self.recovery.resolve_failed_turn(sid, decision.turn_id)
                self._say(
                    sid,
                    "resumed",
                    f"resumed after failed turn {decision.turn_id}",
                    turn=decision.turn_id,
                )
                return _GO_ON
        damaged = artifact_damage(session)
        if damaged is not None:
            return self._halt(session, "mark_crashed", damaged)
        kind = session.host_kind
        disabled = disabled_host_reason(self.sessions.store, kind)
        if disabled is not None:  # the project disabled its host kind: no turn starts
            hint = f"turnkeeper extensions enable {kind}, then turnkeeper session resume {sid}"
            self._say(sid, "extension_disabled", f"host kind {kind} is disabled here ({hint})")
            why = f"extension_disabled: host kind {kind} ({disabled})"
            stop, why = self.stops.halt(session, "suspend", why, stop="extension_disabled")
            return _Next(stop=stop, reason=why, outcome=SessionOutcome.SUSPENDED)
        goal = self.goals.load(session.goal_id)
        plan = plan_next_turn(session, self._views.view(goal, session, now), now)
        if isinstance(plan, Stop):
            return self._stopped(sid, plan)
        pace = pace_next_turn(
            session,
            self.config.policy,
            self.config.progress,
            now,
            no_progress_reported=no_progress_reported(goal, session),
        )
        if pace.action == "crash":
            return self._halt(session, "mark_crashed", pace.reason)
        if pace.action == "suspend":
            return self._halt(session, "suspend", pace.reason)
        if pace.action == "wait" and pace.not_before is not None:
            wait_s = (pace.not_before - now).total_seconds()
            self._say(
                sid,
                "backing_off",
                f"backing off {wait_s:.1f}s after a host failure",
                wait_seconds=round(wait_s, 3),
            )
            return _Next(not_before=pace.not_before)
        if pace.action == "raise_replan":
            self.goals.submit(session.goal_id, no_progress_report(session))
            idle = session.turns_without_progress
            self._say(sid, "replan_raised", f"no progress in {idle} turns; replan raised")
            goal = self.goals.load(goal.goal.id)
            plan = plan_next_turn(session, self._views.view(goal, session, now), now)
            if isinstance(plan, Stop):
                return self._stopped(sid, plan)
        if sid not in self._hosts_ready:
            not_ready = self._host_not_ready(session)
            if not_ready is not None:
                return not_ready
        return session, plan, goal

    def _host_not_ready(self, session: SessionState) -> _Next | None:
        """Before a session's first turn in this run: can its agent CLI run it here
        (binary, version, a key it will use: ``turnkeeper doctor``'s checks)? One that
        cannot is suspended (``host_not_ready``) with the doctor's fix, before a turn is
        accepted: no attempt spent, and the other sessions go on."""
        sid, kind = session.session_id, session.host_kind
        setup = (kind, json.dumps(session.host_config, sort_keys=True))
        problems: list[Finding] = []
        if setup not in self._ready_setups:
            try:
                problems = host_problems(kind, session.host_config)
            except InvalidArgument as invalid:
                # A config this host no longer accepts: its turn fails to load the host
                # with the reason, under the bounded failure policy, as before.
                log.warning("session %s: host readiness not checked: %s", sid, invalid)
        if not problems:
            self._ready_setups.add(setup)
            self._hosts_ready.add(sid)
            return None
        found = describe(problems)
        hint = f"then turnkeeper session resume {sid}"
        self._say(
            sid,
            HOST_NOT_READY,
            f"host {kind} is not ready here: {found}; {hint}",
            host=kind,
            findings=[p.model_dump(mode="json") for p in problems],
        )
        why = fit_title(f"{HOST_NOT_READY}: {found}")
        stop, why = self.stops.halt(session, "suspend", why, stop=HOST_NOT_READY)
        return _Next(stop=stop, reason=why, outcome=SessionOutcome.SUSPENDED)

    # --- stopping a session (runtime/control/session_stops.py) -----------------------------------

    def _halt(self, session: SessionState, action: StatusAction, reason: str) -> _Next:
        stop, why = self.stops.halt(session, action, reason)
        crashed = action == "mark_crashed"
        outcome = SessionOutcome.CRASHED if crashed else SessionOutcome.SUSPENDED
        return _Next(stop=stop, reason=why, outcome=outcome)

    def _stopped(self, sid: str, plan: Stop) -> _Next:
        stop = self.stops.stopped(sid, plan)
        # A session that could not settle is suspended for an operator (quarantined).
        quarantined = stop == QUARANTINED
        outcome = SessionOutcome.SUSPENDED if quarantined else planned_outcome(plan.reason)
        return _Next(stop=stop, outcome=outcome)

"""The control loop: take the sessions' leases, recover what was in flight, drive turns.

``run`` first applies the recovery table to every session it drives, then runs
turns until each goal passes its terminal audit (and is closed with a structured
no-follow-up), a gate blocks, the turn budget is spent, a policy stops the session
(host failures, no progress: ``kernel/session/policy.py``), an operator takes it
over, or a signal asks it to stop (``runtime/stopping.py``).

Every lease the controller holds is renewed for as long as it holds it, so a long
turn on one session never costs another session its lease; a session whose lease
was taken over (``session stop`` from another shell, a controller that outlived its
lease) is dropped from this run, the others go on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from turnkeeper.errors import Aborted, FailedPrecondition, TurnkeeperError, Unavailable
from turnkeeper.hosts import load_host, process_tree
from turnkeeper.hosts.base import TurnLimits
from turnkeeper.kernel.model import NoFollowUpReason
from turnkeeper.kernel.proposals import CloseGoal
from turnkeeper.kernel.session import (
    AcquireLease,
    LeaseToken,
    ProgressPolicy,
    RecoveryPolicy,
    ReleaseLease,
    RenewLease,
    SessionState,
    SetStatus,
    Stop,
    decide_recovery,
    pace_next_turn,
    plan_next_turn,
)
from turnkeeper.kernel.session.events import StatusAction
from turnkeeper.runtime.claims import release_session_claims
from turnkeeper.runtime.controller_identity import controller_owner, owner_is_dead
from turnkeeper.runtime.driver import DriverConfig, HostLoader, TurnDriver
from turnkeeper.runtime.goals import GoalService
from turnkeeper.runtime.host_receipts import failure_reason
from turnkeeper.runtime.planning import goal_view
from turnkeeper.runtime.recovery import SessionRecovery
from turnkeeper.runtime.run_progress import Reporter, RunMonitor, RunRecord
from turnkeeper.runtime.runner_link import Reattached, RunnerLink, RunnerWait
from turnkeeper.runtime.scheduler import SessionThreads, TurnSlots
from turnkeeper.runtime.session_checks import (
    artifact_damage,
    no_progress_report,
    no_progress_reported,
)
from turnkeeper.runtime.sessions import SessionService
from turnkeeper.runtime.settlement import Settlement, settle_session
from turnkeeper.runtime.workspace_claims import check_workspaces_not_ahead
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
# Sessions recovered at once on restart (threads: the work is probes and commits).
RECOVERY_WORKERS = 8
# Why a session stopped being driven because it changed under this controller.
_TAKEN_FROM_US = frozenset({"stale_lease", "lease_held"})
_CHANGED_UNDER_US = frozenset(
    {"session_suspended", "session_crashed", "session_closed", "session_deleted"}
)


@dataclass
class ControllerConfig:
    lease_seconds: float = 120.0
    host_timeout_seconds: int = 3600
    policy: RecoveryPolicy = field(default_factory=lambda: RecoveryPolicy(max_attempts=4))
    progress: ProgressPolicy = field(default_factory=ProgressPolicy)
    max_turns: int | None = None
    # Turns (hosts) running at once; sessions beyond it wait for a free slot.
    max_concurrent: int = 64
    close_goal_when_terminal: bool = True
    host_loader: HostLoader = load_host
    turn_limits: TurnLimits = field(default_factory=TurnLimits)
    # Seconds without any host output before ``run`` warns that the host is silent.
    silence_warning_seconds: float = 120.0
    # The project's runner (runtime/runner_link.py): hosts run their turns there, and
    # turns it kept running through a restart are reattached. None: hosts are ours.
    runner: RunnerLink | None = None
    # ``--runner require``: seconds a session waits for a runner that does not answer.
    runner_wait_seconds: float = 300.0


@dataclass
class RunSummary:
    turns: int = 0
    failed_turns: int = 0
    reattached: int = 0  # turns a runner kept running through a restart, finished here
    stops: dict[str, str] = field(default_factory=dict)  # session id -> why it stopped
    # session id -> the typed reason behind a stop, where there is one
    # (``crashed``: recovery_attempts_exhausted; ``lease_lost``: who took it over).
    reasons: dict[str, str] = field(default_factory=dict)
    # Sessions' threads write here at once.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def stop(self, session_id: str, why: str, reason: str = "") -> None:
        with self._lock:
            self.stops.setdefault(session_id, why)
            if reason and session_id not in self.reasons:
                self.reasons[session_id] = reason

    def count_failure(self) -> None:
        with self._lock:
            self.failed_turns += 1


@dataclass(frozen=True)
class _Next:
    """What one step of a session decided: go on, wait until a time, or stop."""

    stop: str | None = None
    reason: str = ""
    not_before: datetime | None = None


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
        gets the structured records instead (runtime/run_progress.py)."""
        self.config = config or ControllerConfig()
        self.sessions = SessionService(store)
        self.goals = GoalService(store)
        self.owner = owner or controller_owner()
        self._tokens: dict[str, LeaseToken] = {}
        text_only = progress or (lambda _: None)
        self._report: Reporter = reporter or (lambda record: text_only(record.text))
        self._stop = threading.Event()
        self._slots = TurnSlots(self.config.max_concurrent, self.config.max_turns, self._stop)
        # Recoveries at once: probes (git, /proc) and commits overlap, bounded.
        self._recovery_slots = threading.BoundedSemaphore(RECOVERY_WORKERS)
        runner = self.config.runner
        driver_config = DriverConfig(
            lease_seconds=self.config.lease_seconds,
            host_timeout_seconds=self.config.host_timeout_seconds,
            host_loader=(
                runner.loader(None if runner.required else self.config.host_loader)
                if runner is not None
                else self.config.host_loader
            ),
            turn_limits=self.config.turn_limits,
        )
        self.driver = TurnDriver(self.sessions, self.goals, self.token, driver_config)
        self.recovery = SessionRecovery(
            self.sessions, self.goals, self.driver, self.token, runner=runner
        )
        self._runner_wait = (
            RunnerWait(runner, self.config.runner_wait_seconds) if runner is not None else None
        )
        # Running hosts as ``run`` shows them: elapsed time, latest message, silence.
        self.monitor = RunMonitor(self._report, self.config.silence_warning_seconds)
        self.driver.watcher = self.monitor

    def _say(
        self, sid: str, event: str, text: str, *, named: bool = True, **fields: object
    ) -> None:
        """Report a step of a session (``event`` names it for programs; ``named``
        starts the line with the session)."""
        shown = f"session {sid[:8]}: {text}" if named else text
        self._report(RunRecord("session", shown, sid, {"event": event, **fields}))

    def token(self, session_id: str) -> LeaseToken:
        return self._tokens[session_id]

    def request_stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # --- leases ----------------------------------------------------------------------

    def acquire(
        self,
        session_id: str,
        purpose: Literal["work", "delete"] = "work",
        *,
        take_over_live: str | None = None,
    ) -> LeaseToken:
        """The session's lease for this controller, taking over a holder proven dead.

        A closed session grants one only to delete it (``purpose="delete"``).
        ``take_over_live`` (an operator's reason, e.g. ``session stop``) takes over a
        live holder too: its next write is fenced off. The lease is renewed from now
        on until :meth:`release`.
        """
        until = self.sessions.now() + timedelta(seconds=self.config.lease_seconds)
        try:
            done = self.sessions.execute(
                session_id, AcquireLease(owner=self.owner, expires_at=until, purpose=purpose)
            )
        except Aborted as held:
            previous = str(held.details.get("owner", ""))
            if held.reason != "lease_held":
                raise
            if take_over_live is not None:
                proof = f"taken over from live {previous}: {take_over_live}"
            elif owner_is_dead(previous):
                proof = f"process {previous} is gone"
                self._say(
                    session_id,
                    "lease_taken_over",
                    f"taking over the lease of dead controller {previous}",
                    named=False,
                    previous_owner=previous,
                )
            else:
                raise
            token = LeaseToken(owner=previous, epoch=int(held.details["epoch"]))
            done = self.sessions.execute(
                session_id,
                AcquireLease(
                    owner=self.owner,
                    expires_at=until,
                    purpose=purpose,
                    takeover_from=token,
                    takeover_proof=proof[:2000],
                ),
            )
        assert done.state is not None
        token = LeaseToken(owner=self.owner, epoch=done.state.lease.epoch)
        if session_id not in self._tokens:
            self.driver.lease_keeper.hold(session_id)
        self._tokens[session_id] = token
        return token

    def release(self, session_id: str) -> None:
        token = self._tokens.pop(session_id, None)
        if token is not None:
            self.driver.lease_keeper.drop(session_id)
            # Fenced off already means nothing of ours is left to release.
            with suppress(TurnkeeperError):
                self.sessions.execute(session_id, ReleaseLease(lease=token))

    def forget(self, session_id: str) -> None:
        """Stop renewing a lease that is no longer ours (taken over), or that this
        controller cannot reach the database to release: nothing to release."""
        if self._tokens.pop(session_id, None) is not None:
            self.driver.lease_keeper.drop(session_id)

    def release_all(self) -> None:
        for sid in list(self._tokens):
            self.release(sid)

    def report(self, record: RunRecord) -> None:
        self._report(record)

    @property
    def turns_started(self) -> int:
        return self._slots.started

    def drive_shared(self, sid: str, summary: RunSummary) -> None:
        """Drive one session as one of several workers (runtime/worker.py): a session
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
            report = self.recovery.recover(sid)
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
            for sid in list(self._tokens):
                self.release(sid)
        summary.turns = self._slots.started
        if threads.errors:
            raise threads.errors[0]
        return summary

    def _drive_session(self, sid: str, summary: RunSummary) -> None:
        """One session from its lease and recovery to its stop (this thread's whole life)."""
        try:
            with self._recovery_slots:
                if not self._recover(sid, summary):
                    return
            self._drive_turns(sid, summary)
        except BaseException as error:
            summary.stop(sid, "error", f"{type(error).__name__}: {error}"[:500])
            raise

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
                summary.stop(sid, step.stop, step.reason)
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
        began = time.monotonic()
        result = self.driver.continue_reattached(session, attached)
        with summary._lock:
            summary.reattached += 1
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
        try:
            self.acquire(sid)
        except Aborted as held:
            if held.reason != "lease_held":
                raise
            owner = str(held.details.get("owner", "?"))
            self._say(sid, "lease_held", f"driven by {owner}; left to it", owner=owner)
            summary.stop(sid, "lease_held", owner)
            return False
        report = self.recovery.recover(sid)
        kinds = ", ".join(a.kind for a in report.actions)
        actions = [a.kind for a in report.actions]
        self._say(sid, "recovered", f"recovered ({kinds})", actions=actions)
        return True

    def _keep_lease_fresh(self, session: SessionState) -> SessionState:
        """Renew the session's lease between turns once half of it is spent; the state after.

        The lease keeper renews it every third of its length; this covers a keeper
        that fell behind (a stalled machine) before a turn is accepted on it.
        """
        lease = session.lease
        now = self.sessions.now()
        half = timedelta(seconds=self.config.lease_seconds / 2)
        if lease.expires_at is not None and lease.expires_at - now >= half:
            return session
        sid = session.session_id
        until = now + timedelta(seconds=self.config.lease_seconds)
        done = self.sessions.execute(sid, RenewLease(lease=self.token(sid), expires_at=until))
        return done.state if done.state is not None else self.sessions.load(sid)

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
            return _Next(stop="runner_unavailable", reason=why)
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
        session = self._keep_lease_fresh(self.sessions.load(sid))
        now = self.sessions.now()
        if session.recovery is not None and session.recovery.status == "awaiting_resolution":
            decision = decide_recovery(session, self.config.policy, now)
            if decision.action == "crash":
                return self._halt(session, "mark_crashed", decision.reason)
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
        goal = self.goals.load(session.goal_id)
        plan = plan_next_turn(session, goal_view(goal, sid, now), now)
        if isinstance(plan, Stop):
            return _Next(stop=self._stopped(sid, plan))
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
            plan = plan_next_turn(session, goal_view(self.goals.load(goal.goal.id), sid, now), now)
            if isinstance(plan, Stop):
                return _Next(stop=self._stopped(sid, plan))
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
            result = self.driver.run_turn(session, plan)
        finally:
            self._slots.give_back()
        outcome = result.outcome
        if not result.succeeded:
            summary.count_failure()
        self.monitor.turn_ended(
            sid,
            result.turn_id,
            succeeded=result.succeeded,
            error_kind=outcome.error_kind.value if outcome.error_kind else None,
            reason=None if result.succeeded else failure_reason(outcome),
            fallback_seconds=time.monotonic() - began,
        )
        return _GO_ON

    # --- stopping a session -------------------------------------------------------------

    def _halt(self, session: SessionState, action: StatusAction, reason: str) -> _Next:
        """Suspend or crash a session a policy stopped, and give its todos back."""
        sid = session.session_id
        self.sessions.execute(sid, SetStatus(lease=self.token(sid), action=action, reason=reason))
        released = release_session_claims(self.goals, session.goal_id, sid)
        freed = f"; released {', '.join(released)}" if released else ""
        status = "crashed" if action == "mark_crashed" else "suspended"
        self._say(sid, status, f"{status} ({reason}){freed}", reason=reason, released=released)
        return _Next(stop=reason if action == "suspend" else "crashed", reason=reason)

    def _quarantine(self, sid: str, settlement: Settlement) -> str:
        """Suspend a session that cannot settle, for an operator, with what still runs
        (``session resume`` and the next ``run`` settle it again)."""
        why = f"quarantined: {settlement.describe()}"
        self.sessions.execute(sid, SetStatus(lease=self.token(sid), action="suspend", reason=why))
        self._say(sid, "quarantined", why, processes=settlement.left)
        return "quarantined"

    def _stopped(self, sid: str, plan: Stop) -> str:
        if plan.reason == "goal_terminal" and self.config.close_goal_when_terminal:
            session = self.sessions.load(sid)
            goal = self.goals.load(session.goal_id)
            if not goal.is_closed:
                self.goals.submit(
                    session.goal_id,
                    CloseGoal(
                        reason=NoFollowUpReason.ACCEPTANCE_MET,
                        summary=f"terminal audit passed; closed by session {sid}",
                    ),
                )
                self._report(
                    RunRecord(
                        "session",
                        f"goal {session.goal_id}: terminal audit passed, closed",
                        sid,
                        {"event": "goal_closed", "goal": session.goal_id},
                    )
                )
            # The session's work is done: close it so later runs leave it alone, once
            # nothing of it runs any more; a session that cannot settle is left alone.
            settlement = settle_session(sid)
            if not settlement.settled:
                return self._quarantine(sid, settlement)
            self.sessions.execute(
                sid, SetStatus(lease=self.token(sid), action="close", reason="goal closed")
            )
        self._say(sid, "stopped", f"stopped ({plan.reason}: {plan.message})", reason=plan.reason)
        return plan.reason

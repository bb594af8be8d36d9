"""The control loop: take the sessions' leases, recover what was in flight, drive turns.

``run`` first applies the recovery table to every session it drives, then runs
turns until each goal passes its terminal audit (and is closed with a structured
no-follow-up), a gate blocks, the turn budget is spent, the recovery policy
gives up, or a signal asks it to stop. SIGINT/SIGTERM stop after the turn in
flight reaches its durable end; a second signal exits at once (the next ``run``
recovers that turn as lost).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Literal

from turnkeeper.errors import Aborted, TurnkeeperError
from turnkeeper.hosts import load_host, process_tree
from turnkeeper.kernel.model import NoFollowUpReason
from turnkeeper.kernel.proposals import CloseGoal
from turnkeeper.kernel.session import (
    AcquireLease,
    LeaseToken,
    RecoveryPolicy,
    ReleaseLease,
    RenewLease,
    SessionState,
    SetStatus,
    Stop,
    decide_recovery,
    plan_next_turn,
)
from turnkeeper.runtime.driver import DriverConfig, HostLoader, TurnDriver
from turnkeeper.runtime.goals import GoalService
from turnkeeper.runtime.planning import goal_view
from turnkeeper.runtime.recovery import SessionRecovery
from turnkeeper.runtime.sessions import SessionService
from turnkeeper.runtime.snapshots import sha256_file
from turnkeeper.store.base import EventStore

Progress = Callable[[str], None]
# Sessions recovered at once on restart (threads: the work is probes and commits).
RECOVERY_WORKERS = 8


def controller_owner() -> str:
    """This controller's lease owner name: host, pid and start time, so a successor
    on the same machine can prove it dead and take its leases over at once."""
    me = process_tree.identify(os.getpid(), "controller")
    return f"ctl:{socket.gethostname()}:{me.pid}:{me.start_time}"


def owner_is_dead(owner: str) -> bool:
    parts = owner.split(":")
    if len(parts) != 4 or parts[0] != "ctl" or parts[1] != socket.gethostname():
        return False  # another machine's controller: only its lease expiry can tell
    pid, start = parts[2], parts[3]
    if not (pid.isdigit() and start.isdigit()):
        return False
    stat = process_tree.read_stat(int(pid))
    return stat is None or stat.start_time != int(start) or stat.dead


def artifact_damage(session: SessionState) -> str | None:
    """Why the host session artifact cannot be resumed (missing, or not what the last
    snapshot recorded), or None. Checked only while the last turn is the completed
    one: a later failed or lost turn may have legitimately written to it."""
    last, end = session.last_completed, session.last_turn_end
    if last is None or end is None or end.turn_id != last.turn_id:
        return None
    if session.in_flight is not None or session.recovery is not None:
        return None
    snap = last.snapshot
    if snap.host_artifact_path is None or snap.host_artifact_digest is None:
        return None
    live = Path(snap.host_artifact_path)
    if not live.is_file():
        return "host_artifact_missing"
    if sha256_file(live) != snap.host_artifact_digest:
        return "host_artifact_digest_mismatch"
    return None


@dataclass
class ControllerConfig:
    lease_seconds: float = 120.0
    host_timeout_seconds: int = 3600
    policy: RecoveryPolicy = field(default_factory=lambda: RecoveryPolicy(max_attempts=4))
    max_turns: int | None = None
    close_goal_when_terminal: bool = True
    host_loader: HostLoader = load_host


@dataclass
class RunSummary:
    turns: int = 0
    failed_turns: int = 0
    stops: dict[str, str] = field(default_factory=dict)  # session id -> why it stopped


class Controller:
    def __init__(
        self,
        store: EventStore,
        config: ControllerConfig | None = None,
        progress: Progress | None = None,
        owner: str | None = None,
    ):
        self.config = config or ControllerConfig()
        self.sessions = SessionService(store)
        self.goals = GoalService(store)
        self.owner = owner or controller_owner()
        self._tokens: dict[str, LeaseToken] = {}
        self._progress = progress or (lambda _: None)
        self._stop = threading.Event()
        driver_config = DriverConfig(
            lease_seconds=self.config.lease_seconds,
            host_timeout_seconds=self.config.host_timeout_seconds,
            host_loader=self.config.host_loader,
        )
        self.driver = TurnDriver(self.sessions, self.goals, self.token, driver_config)
        self.recovery = SessionRecovery(self.sessions, self.goals, self.driver, self.token)

    def token(self, session_id: str) -> LeaseToken:
        return self._tokens[session_id]

    def request_stop(self) -> None:
        self._stop.set()

    # --- leases ----------------------------------------------------------------------

    def acquire(self, session_id: str, purpose: Literal["work", "delete"] = "work") -> LeaseToken:
        """The session's lease for this controller, taking over a holder proven dead.
        A closed session grants one only to delete it (``purpose="delete"``)."""
        until = self.sessions.now() + timedelta(seconds=self.config.lease_seconds)
        try:
            done = self.sessions.execute(
                session_id, AcquireLease(owner=self.owner, expires_at=until, purpose=purpose)
            )
        except Aborted as held:
            previous = str(held.details.get("owner", ""))
            if held.reason != "lease_held" or not owner_is_dead(previous):
                raise
            self._progress(f"taking over the lease of dead controller {previous}")
            token = LeaseToken(owner=previous, epoch=int(held.details["epoch"]))
            done = self.sessions.execute(
                session_id,
                AcquireLease(
                    owner=self.owner,
                    expires_at=until,
                    purpose=purpose,
                    takeover_from=token,
                    takeover_proof=f"process {previous} is gone",
                ),
            )
        assert done.state is not None
        token = LeaseToken(owner=self.owner, epoch=done.state.lease.epoch)
        self._tokens[session_id] = token
        return token

    def release(self, session_id: str) -> None:
        token = self._tokens.pop(session_id, None)
        if token is not None:
            # Fenced off already means nothing of ours is left to release.
            with suppress(TurnkeeperError):
                self.sessions.execute(session_id, ReleaseLease(lease=token))

    # --- the loop --------------------------------------------------------------------

    def run(self, session_ids: list[str] | None = None) -> RunSummary:
        process_tree.become_subreaper()
        ids = session_ids or [
            s.session_id for s in self.sessions.list() if s.status in ("ready", "running")
        ]
        summary = RunSummary()
        active: list[str] = []
        try:
            active.extend(self._recover_all(ids))
            while active and not self._stop.is_set():
                for sid in list(active):
                    why = self._step(sid, summary)
                    if why is not None:
                        summary.stops[sid] = why
                        active.remove(sid)
                    if self._stop.is_set() or self._budget_spent(summary):
                        break
                if self._budget_spent(summary):
                    for sid in active:
                        summary.stops[sid] = "budget"
                    break
            for sid in active:
                summary.stops.setdefault(sid, "signalled")
        finally:
            for sid in list(self._tokens):
                self.release(sid)
        return summary

    def _recover_all(self, ids: list[str]) -> list[str]:
        """Take each session's lease and apply the recovery table to it, several sessions
        at a time: their probes (git, /proc) overlap, and their commits share the
        store's group commit — after a crash with many turns in flight, restart time
        is what they have in flight, not one fsync and one probe after another.
        Sessions are independent, so the order they finish in does not matter; the
        first error is raised once every session got its chance."""

        def recover(sid: str) -> str:
            self.acquire(sid)
            report = self.recovery.recover(sid)
            kinds = ", ".join(a.kind for a in report.actions)
            self._progress(f"session {sid[:8]}: recovered ({kinds})")
            return sid

        if len(ids) <= 1:
            return [recover(sid) for sid in ids]
        workers = min(RECOVERY_WORKERS, len(ids))
        with ThreadPoolExecutor(workers, thread_name_prefix="turnkeeper-recovery") as pool:
            futures = [pool.submit(recover, sid) for sid in ids]
            wait(futures)
        for future in futures:
            error = future.exception()
            if error is not None:
                raise error
        return [future.result() for future in futures]

    def _budget_spent(self, summary: RunSummary) -> bool:
        return self.config.max_turns is not None and summary.turns >= self.config.max_turns

    def _keep_lease_fresh(self, session: SessionState) -> SessionState:
        """Renew the session's lease between turns once half of it is spent; the state after.

        The driver renews it while a host runs; a run of many short turns must
        renew it too, or it outlives its own lease and is fenced off.
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

    def _step(self, sid: str, summary: RunSummary) -> str | None:
        """Run one turn of a session; the reason it stopped, or None to go on."""
        session = self._keep_lease_fresh(self.sessions.load(sid))
        now = self.sessions.now()
        if session.recovery is not None and session.recovery.status == "awaiting_resolution":
            decision = decide_recovery(session, self.config.policy, now)
            if decision.action == "crash":
                self.sessions.execute(
                    sid,
                    SetStatus(lease=self.token(sid), action="mark_crashed", reason=decision.reason),
                )
                self._progress(f"session {sid[:8]}: crashed ({decision.reason})")
                return "crashed"
            if decision.action == "wait" and decision.not_before is not None:
                self._stop.wait((decision.not_before - now).total_seconds())
                return None
            if decision.action == "recover_now" and decision.turn_id is not None:
                self.recovery.resolve_failed_turn(sid, decision.turn_id)
                self._progress(f"session {sid[:8]}: resumed after failed turn {decision.turn_id}")
                return None
        damaged = artifact_damage(session)
        if damaged is not None:
            self.sessions.execute(
                sid, SetStatus(lease=self.token(sid), action="mark_crashed", reason=damaged)
            )
            self._progress(f"session {sid[:8]}: crashed ({damaged})")
            return "crashed"
        goal = self.goals.load(session.goal_id)
        plan = plan_next_turn(session, goal_view(goal, sid, now), now)
        if isinstance(plan, Stop):
            return self._stopped(sid, plan)
        self._progress(f"session {sid[:8]}: {plan.kind} turn on {plan.todo_id or 'the goal'}")
        result = self.driver.run_turn(session, plan)
        summary.turns += 1
        if not result.succeeded:
            summary.failed_turns += 1
            kind = result.outcome.error_kind.value if result.outcome.error_kind else "?"
            self._progress(f"session {sid[:8]}: turn {result.turn_id} failed ({kind})")
        return None

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
                self._progress(f"goal {session.goal_id}: terminal audit passed, closed")
            # The session's work is done: close it so later runs leave it alone.
            self.sessions.execute(
                sid, SetStatus(lease=self.token(sid), action="close", reason="goal closed")
            )
        self._progress(f"session {sid[:8]}: stopped ({plan.reason}: {plan.message})")
        return plan.reason


@contextmanager
def stop_on_signals(controller: Controller) -> Iterator[None]:
    """First SIGINT/SIGTERM: stop at the next durable boundary. Second: exit now."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        if controller._stop.is_set():
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        controller.request_stop()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)

"""The turn driver: one turn through the turn transaction (docs/design.md), step by step.

1. claim the todo, then ``turn.accepted`` (fsync'd)
2. host started — process identity (a cheap commit: recovery finds the process by marker)
3. host events, journaled in batches by host sequence number (cheap commits), each
   within a second (runtime/turn/event_pump.py)
4. receipt (fsync'd): success with the result, or failure with a host recovery record
5. write-back through the goal kernel, then ``turn.written_back``
6. effects the result requested: intent, readback, apply, outcome (runtime/turn/effects.py)
7. ``turn.completed`` with the snapshot reference

A crash point sits after each step, so tests can SIGKILL the real process there. Each
step — what it writes, in which commit, its crash point, what recovery does after a
crash there — is declared once in runtime/turn/steps.py.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path

from turnkeeper.brief import TurnBrief
from turnkeeper.crashpoints import crash_point
from turnkeeper.effects import ProviderLoader, load_provider, split_host_config
from turnkeeper.errors import TurnkeeperError
from turnkeeper.host_reports import HostEvent
from turnkeeper.hosts import (
    HostErrorKind,
    HostLoader,
    HostOutcome,
    HostRun,
    HostSpawnFailed,
    HostStatus,
    TurnRequest,
    load_host,
)
from turnkeeper.hosts.base import TurnLimits
from turnkeeper.hosts.tree_cpu import TreeCpu
from turnkeeper.kernel import GoalState
from turnkeeper.kernel.proposals import ClaimTodo
from turnkeeper.kernel.session import (
    HostRecoveryRecord,
    InteractionContract,
    LeaseToken,
    NextTurn,
    RecordHostStarted,
    RecordReceipt,
    SessionState,
    TurnEnvelope,
    plan_effects,
)
from turnkeeper.kernel.session.records import (
    ReceiptFailure,
    ReceiptSuccess,
    RecoveryBinding,
)
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.turn import event_pump
from turnkeeper.runtime.turn.agent_result import AgentResult, MalformedResult, parse_result
from turnkeeper.runtime.turn.agent_side import AgentSide
from turnkeeper.runtime.turn.brief import AgentLimits, instructions_of
from turnkeeper.runtime.turn.clock import SYSTEM_CLOCK, Clock
from turnkeeper.runtime.turn.commits import TurnCommits
from turnkeeper.runtime.turn.effects import EffectRunner, EffectsSummary
from turnkeeper.runtime.turn.event_pump import TIMED_OUT, CappedEvents, EventBatcher, feed_of
from turnkeeper.runtime.turn.fencing import HostFence, LeaseDeadlines
from turnkeeper.runtime.turn.host_journal import PendingStart, journal_host
from turnkeeper.runtime.turn.host_receipts import (
    artifact_digest,
    artifact_path,
    checked_result,
    failure_reason,
)
from turnkeeper.runtime.turn.host_receipts import bounded_result as _bounded_result
from turnkeeper.runtime.turn.lease_keeper import LEASE_SECONDS, LeaseKeeper, renewing
from turnkeeper.runtime.turn.run_progress import TurnWatcher
from turnkeeper.runtime.turn.runner_link import Reattached, forget_turn
from turnkeeper.runtime.turn.running_hosts import EndedHosts, RunningHost, RunningHosts
from turnkeeper.runtime.turn.silence import SilenceWatch
from turnkeeper.runtime.turn.spans import TurnTracing
from turnkeeper.runtime.turn.writeback import (
    PreparedWriteBack,
    WriteBackResult,
    claim_owner,
    needs_outside_work,
    prepare_write_back,
    refused_write_back,
)
from turnkeeper.runtime.workspaces.workspace import workspace_path
from turnkeeper.tools.channel import ToolChannels

# Events per journal commit at most (the pump's rule; tests read it here).
EVENT_BATCH = event_pump.EVENT_BATCH
log = logging.getLogger(__name__)
DEFAULT_CONTRACT = InteractionContract(
    stop_condition="Stop when the todo is done or you need a human decision; report what you did."
)


@dataclass
class DriverConfig:
    """What a turn driver is told; :class:`ControllerConfig` adds what the control loop is
    told (runtime/control/run_config.py)."""

    lease_seconds: float = LEASE_SECONDS
    host_timeout_seconds: int = 3600
    # Seconds a running host may go without progress (an event other than a non-fatal
    # error, or CPU in its process tree) before its tree is ended and its turn fails
    # as ``hung`` (runtime/turn/silence.py). None or 0: never.
    silence_timeout_seconds: float | None = 600.0
    # How a host kind becomes a Host: entry points by default; tests may inject.
    host_loader: HostLoader = load_host
    # How an effect provider kind becomes a provider (entry points by default).
    provider_loader: ProviderLoader = load_provider
    # Snapshots kept per session (None: TURNKEEPER_SNAPSHOT_RETAIN or 20).
    snapshot_retain: int | None = None
    # What of a turn's output is journaled, and how large a result may be; handed
    # to the host in the request and enforced here whatever the host does.
    turn_limits: TurnLimits = field(default_factory=TurnLimits)
    # When the controller acts (lease renewals); leases expire by the store's clock.
    clock: Clock = SYSTEM_CLOCK
    # Where each turn's tool channel lives (turnkeeper/tools/channel.py; ``run`` uses the
    # project's .turnkeeper/turns/). None: agents get no turnkeeper tools.
    tools_dir: Path | None = None
    # The session's bounds as its agent's brief states them.
    agent_limits: AgentLimits = field(default_factory=AgentLimits)


@dataclass(frozen=True)
class TurnResult:
    turn_id: str
    succeeded: bool
    outcome: HostOutcome


def _spawn_failure(error: TurnkeeperError) -> HostOutcome:
    return HostOutcome(
        status=HostStatus.FAILED,
        error_kind=HostErrorKind.SPAWN,
        message=f"host not started: {error.code.value} ({error.reason}): {error.message}",
    )


def new_turn_id() -> str:
    # 64 random bits as 16 hex digits, the shape ids always had (a uuid4's first 16
    # digits, one of them the fixed version digit): without building a UUID each turn.
    return f"turn-{os.urandom(8).hex()}"


class TurnDriver:
    def __init__(
        self,
        sessions: SessionService,
        goals: GoalService,
        token: Callable[[str], LeaseToken],
        config: DriverConfig | None = None,
    ):
        self._sessions = sessions
        self._goals = goals
        self._token = token  # the lease this controller holds on a session
        self._config = config or DriverConfig()
        self._effects = EffectRunner(sessions, goals, token, self._config.provider_loader)
        self._commits = TurnCommits(
            sessions.store, sessions.now, token, retain=self._config.snapshot_retain
        )
        # Until when each lease is confirmed: what the fence ends a host by when its lease
        # could not be renewed before it runs out (runtime/turn/fencing.py).
        self.lease_deadlines = LeaseDeadlines(self._config.lease_seconds)
        # Renews every lease its owner holds (the controller holds each session's for
        # the whole run) and, around a running host, the running session's.
        self.lease_keeper = LeaseKeeper(
            renewing(sessions, token, self._config.lease_seconds, self.lease_deadlines),
            self._config.lease_seconds / 3,
            self._config.clock,
        )
        # The brief and the tool channel of each turn's agent.
        silence = self._config.silence_timeout_seconds
        tools_dir = self._config.tools_dir
        self._agent = AgentSide(
            sessions,
            goals,
            ToolChannels(tools_dir) if tools_dir is not None else None,
            replace(
                self._config.agent_limits,
                timeout_seconds=float(self._config.host_timeout_seconds),
                silence_seconds=silence or None,
            ),
        )
        # Hosts running now, by turn id: what a second SIGINT ends (runtime/control/stopping.py).
        self._hosts = RunningHosts()
        self._fence = HostFence(self.lease_deadlines, self._hosts, self._fenced)
        # Who is told of each host start and event as the pump sees it, and of what each
        # write-back refused (``run``'s display).
        self.watcher: TurnWatcher | None = None
        # Who is told that the fence ended a host (the controller's report).
        self.fence_notice: Callable[[str, str, str], None] | None = None
        self._commits.written_back = self._written_back
        # OpenTelemetry spans of each turn and step (runtime/turn/spans.py); a no-op
        # without the OpenTelemetry API.
        self.spans = TurnTracing()

    # --- one turn -------------------------------------------------------------------

    def run_turn(
        self, session: SessionState, spec: NextTurn, goal: GoalState | None = None
    ) -> TurnResult:
        """Run one turn of ``spec``; ``goal``: the goal state it was planned on (read
        again when not given)."""
        turn_id = new_turn_id()
        # The turn's span, ended however the turn ends.
        with self.spans.turn(turn_id, session.session_id, str(spec.kind), spec.attempt):
            return self._run_turn(session, spec, goal, turn_id)

    def _run_turn(
        self, session: SessionState, spec: NextTurn, goal: GoalState | None, turn_id: str
    ) -> TurnResult:
        sid = session.session_id
        if goal is None:
            goal = self._goals.load(session.goal_id)
        # The brief is built before the turn is accepted, so ``turn.accepted`` records
        # exactly what the agent is told (its envelope's instructions).
        brief = self._agent.brief(session, turn_id, spec, DEFAULT_CONTRACT, goal)
        envelope = TurnEnvelope.create(
            turn_id=turn_id,
            session_id=sid,
            generation=session.generation,
            goal_id=session.goal_id,
            spec=spec.model_copy(update={"instructions": instructions_of(brief)}),
            contract=DEFAULT_CONTRACT,
        )
        claim, todo_title = self._claim(session, envelope, goal)
        self._commits.intent(session, envelope, claim)
        crash_point("turn.accepted")
        self.spans.reached(turn_id, "accepted")
        request = self._request(session, envelope, todo_title, brief)
        try:
            # The "effects" section is turnkeeper's (runtime/turn/effects.py), not the host's.
            host_config = split_host_config(session.host_config)
            host = self._config.host_loader(session.host_kind, host_config)
            run = host.start(request)
        except HostSpawnFailed as failed:
            return self._finish(session, envelope, failed.outcome)
        except TurnkeeperError as error:
            if error.reason == "runner_unavailable":
                # The runner stopped answering as it was asked to start the host (it
                # may have died having started it): not the host's failure, and no
                # attempt spent. The accepted turn is recovered as after a restart —
                # the dead runner's hosts proven ended, the turn lost, then continued.
                raise
            # The host cannot be loaded or rejects its config (an unknown kind, a plugin
            # since uninstalled): nothing started. Raising would leave the accepted turn
            # in flight, lost on every restart and accepted again without end; a spawn
            # failure puts the turn under the bounded recovery policy instead.
            return self._finish(session, envelope, _spawn_failure(error))
        crash_point("host.spawned")
        self.spans.reached(turn_id, "host_started")
        # Journaled with the turn's next write (runtime/turn/host_journal.py): the recovery
        # table finds the process by marker if it is lost.
        start = PendingStart(
            RecordHostStarted(
                lease=self._token(sid),
                turn_id=envelope.turn_id,
                host_kind=session.host_kind,
                process=run.identity,
                started_at=self._sessions.now(),
            )
        )
        return self._follow(session, envelope, run, after_seq=0, start=start)

    def continue_reattached(self, session: SessionState, attached: Reattached) -> TurnResult:
        """Finish the turn in flight that a runner kept running while no control plane
        watched it (runtime/turn/runner_link.py): journal its events after the last one the
        session has, then its receipt, as :meth:`run_turn` would have."""
        turn = session.in_flight
        assert turn is not None
        sid = session.session_id
        env = turn.envelope
        # A span of its own, from here: the turn's start was another process's.
        with self.spans.turn(env.turn_id, sid, str(env.kind), env.attempt, recovered=True):
            if turn.phase == "accepted":  # the control plane died before it recorded the start
                self._sessions.execute(
                    sid,
                    RecordHostStarted(
                        lease=self._token(sid),
                        turn_id=env.turn_id,
                        host_kind=session.host_kind,
                        process=attached.run.identity,
                    ),
                )
                self.spans.reached(env.turn_id, "host_started")
            return self._follow(session, env, attached.run, after_seq=attached.after_seq)

    def _follow(
        self,
        session: SessionState,
        envelope: TurnEnvelope,
        run: HostRun,
        *,
        after_seq: int,
        start: PendingStart | None = None,
    ) -> TurnResult:
        """Journal a started host's events after ``after_seq`` until it ends, then its
        outcome (with the host's ``start`` first, if no write took it yet)."""
        sid = session.session_id
        with self._fence.watching(), self._hosts.tracking(sid, envelope.turn_id, run):
            try:
                outcome = self._pump(session, envelope, run, after_seq, start)
            except BaseException:
                # The turn can no longer be journaled (fenced off, store gone, a
                # signal): its host must not run on unwatched.
                run.kill_tree()
                self._fence.take(envelope.turn_id)
                raise
        fenced = self._fence.take(envelope.turn_id)
        if fenced is not None and not outcome.succeeded:
            # Ended by the fence (a signal): the receipt says why, if it can still be
            # written (the lease may be renewable again by now).
            outcome = outcome.model_copy(update={"message": fenced})
        stopped = self._hosts.why_ended(envelope.turn_id)
        if stopped is not None and not outcome.succeeded:
            # Ended by a graceful stop's bound (runtime/control/stopping.py): said so.
            outcome = outcome.model_copy(update={"message": stopped})
        if self._hosts.exiting():
            # The process exits by its signal any moment now (the handler that ended
            # the host sends it next): record nothing more.
            raise SystemExit(f"turn {envelope.turn_id} ended by the control plane's exit")
        result = self._finish(session, envelope, outcome, start)
        forget_turn(run)
        return result

    # --- the hosts running now -----------------------------------------------------------

    def _fenced(self, sid: str, turn_id: str, why: str) -> None:
        """The fence ended turn ``turn_id``'s host: tell the watcher (``run``'s display)."""
        if self.fence_notice is not None:
            self.fence_notice(sid, turn_id, why)

    def running_hosts(self) -> list[RunningHost]:
        """The hosts running now: which turn of which session, for how long."""
        return self._hosts.listed()

    def end_running_hosts(self, why: str) -> EndedHosts:
        """End every running host's whole process tree; each turn is recorded as its
        host ended, the receipt saying ``why`` (a graceful stop's bound)."""
        return self._hosts.end_all(why)

    def kill_running_hosts(self) -> EndedHosts:
        """End every running host's whole process tree (a second SIGINT, the process
        about to exit). From now on no turn records its host's end:
        the host died of our kill, not of its own failure, and the next run recovers
        the turn as lost (its continuation tells the agent to reconcile)."""
        return self._hosts.kill_all()

    def _claim(
        self, session: SessionState, envelope: TurnEnvelope, goal: GoalState | None
    ) -> tuple[ClaimTodo | None, str | None]:
        """The claim to commit with the turn's intent (None: nothing to claim), and the
        title. The goal the turn was planned on will do: the claim commits only on the
        head it was decided on (a goal changed since is decided again), and the title
        is the one the plan chose the todo by."""
        if envelope.todo_id is None:
            return None, None
        owner = claim_owner(session.session_id)
        if goal is None:
            goal = self._goals.load(session.goal_id)
        todo = goal.todos.get(envelope.todo_id)
        title = todo.title if todo is not None else None
        if todo is not None and todo.claim is not None and todo.claim.owner == owner:
            return None, title  # our own live claim from the turn this one continues
        until = self._sessions.now() + timedelta(
            seconds=self._config.host_timeout_seconds + self._config.lease_seconds
        )
        return ClaimTodo(todo_id=envelope.todo_id, owner=owner, lease_expires_at=until), title

    def _request(
        self,
        session: SessionState,
        envelope: TurnEnvelope,
        todo_title: str | None,
        brief: TurnBrief | None = None,
    ) -> TurnRequest:
        server = self._agent.tool_server(session, envelope, brief) if brief is not None else None
        return TurnRequest(
            turn_id=envelope.turn_id,
            session_id=session.session_id,
            generation=session.generation,
            attempt=envelope.attempt,
            kind=envelope.kind,
            instructions=envelope.instructions,
            workspace=workspace_path(session.workspace),
            host_session_handle=session.host_session_handle
            if envelope.resume_host_session
            else None,
            todo_id=envelope.todo_id,
            todo_title=todo_title,
            timeout_seconds=self._config.host_timeout_seconds,
            limits=self._config.turn_limits,
            brief=brief,
            tools=server,
        )

    def _pump(
        self,
        session: SessionState,
        envelope: TurnEnvelope,
        run: HostRun,
        after_seq: int = 0,
        start: PendingStart | None = None,
    ) -> HostOutcome:
        """Journal the host's events in order while it runs, renewing our lease meanwhile.

        A batch goes to the journal by count, at once for an urgent event, and at the
        latest a second after its first event (runtime/turn/event_pump.py): the wait for
        the next event is bounded by that second, so a silent host's last line is
        journaled while it stays silent. The wait is bounded by the silence watch too
        (runtime/turn/silence.py): a host that makes no progress for the silence timeout
        has its tree ended, and its turn fails as ``hung``. Each iteration consumes an
        event or empties the batch, and the feed ends with the host's run: the loop is
        bounded."""
        sid = session.session_id
        capped = CappedEvents(self._config.turn_limits, after_seq)
        batch = EventBatcher(max_events=EVENT_BATCH)
        # A run that is told what was kept (a runner's) gets each batch journaled
        # durably first, then acknowledged up to the last host seq read: what it is
        # told of, it may forget (events the cap dropped included: they are counted).
        ack: Callable[[int], object] | None = getattr(run, "ack", None)
        read = after_seq
        silence = self._silence_watch(run)
        hung: str | None = None  # what the silence watch saw, once it ended the host

        def journal(events: list[HostEvent]) -> None:
            started = start.take() if start is not None else []
            if events or started:
                journal_host(
                    self._commits,
                    sid,
                    self._token(sid),
                    envelope.turn_id,
                    events,
                    started,
                    durable=ack is not None,
                )
            if ack is not None and read > after_seq:
                ack(read)

        def wait_seconds() -> float | None:
            events_wait = batch.wait_seconds()
            wait = events_wait if start is None else start.wait_seconds(events_wait)
            if silence is None or hung is not None:
                return wait
            quiet = silence.wait_seconds(time.monotonic())
            return quiet if wait is None else min(wait, quiet)

        self._watch("host_started", sid, envelope)
        with self.lease_keeper.keeping(sid):
            feed = feed_of(run, after_seq, envelope.turn_id)
            while (item := feed.next(timeout=wait_seconds())) is not None:
                if silence is not None and hung is None:
                    hung = self._hung(silence, item, run, envelope.turn_id)
                if item is TIMED_OUT:
                    journal(batch.take())
                    continue
                assert isinstance(item, HostEvent)
                read = item.seq
                event = capped.admit(item)
                if event is None:
                    continue  # over the cap: counted and digested, not journaled
                self._watch("host_event", sid, envelope, event)
                if batch.add(event):
                    journal(batch.take())
            pending = batch.take()
            truncated = capped.truncation()
            if truncated is not None:
                pending.append(truncated)
            if pending or (ack is not None and read > after_seq):
                journal(pending)
            outcome = _bounded_result(run.wait(timeout=None), self._config.turn_limits)
        if hung is not None and not outcome.succeeded:
            # Ended by our kill (a signal): the receipt says why it was killed. A host
            # that succeeded as it was being ended keeps its success.
            outcome = outcome.model_copy(update={"error_kind": HostErrorKind.HUNG, "message": hung})
        return outcome

    @staticmethod
    def _hung(
        silence: SilenceWatch, item: HostEvent | object, run: HostRun, turn_id: str
    ) -> str | None:
        """Tell the watch what the feed gave (an event, or a wake-up); once the host is
        hung, end its tree and say why. The feed then ends once the tree is gone, and
        what the host printed until then is still journaled."""
        now = time.monotonic()
        if isinstance(item, HostEvent):
            silence.saw(item, now)
        hung = silence.expired(now)
        if hung is not None:
            log.info("turn %s: %s; ending its host", turn_id, hung)
            run.kill_tree()
        return hung

    def _silence_watch(self, run: HostRun) -> SilenceWatch | None:
        """The silence watch of ``run`` (None: not watched — no timeout, or a host that
        runs inside this process and has no tree of its own to measure or end)."""
        timeout = self._config.silence_timeout_seconds
        identity = run.identity
        if not timeout or identity.pid == os.getpid():
            return None
        return SilenceWatch(timeout, TreeCpu(identity).used_seconds, now=time.monotonic())

    def _watch(
        self, what: str, sid: str, envelope: TurnEnvelope, event: HostEvent | None = None
    ) -> None:
        """Tell the watcher (``run``'s display) what the host does."""
        if event is None:
            self._tell(what, envelope, lambda w: w.host_started(sid, envelope))
        else:
            self._tell(what, envelope, lambda w: w.host_event(sid, envelope.turn_id, event))

    def _written_back(
        self, session: SessionState, envelope: TurnEnvelope, result: WriteBackResult
    ) -> None:
        """Tell the watcher what a durable write-back refused."""
        if result.rejected:
            sid = session.session_id
            self._tell("refusals", envelope, lambda w: w.refused(sid, envelope, result.rejected))

    def _tell(self, what: str, envelope: TurnEnvelope, call: Callable[[TurnWatcher], None]) -> None:
        """``call(watcher)``, if there is a watcher; its failure is logged, never the
        turn's: what is shown must not decide what is journaled."""
        watcher = self.watcher
        if watcher is None:
            return
        try:
            call(watcher)
        except Exception:
            log.exception("turn %s: the run display failed on %s", envelope.turn_id, what)

    # --- receipt, write-back, completion ------------------------------------------------

    def _finish(
        self,
        session: SessionState,
        envelope: TurnEnvelope,
        outcome: HostOutcome,
        start: PendingStart | None = None,
    ) -> TurnResult:
        """The receipt, and for a turn that needs no outside work its write-back and
        completion, in one commit; the host's ``start`` goes first if still unjournaled."""
        sid = session.session_id
        started = start.take() if start is not None else []
        token = self._token(sid)
        outcome = self._agent.with_tool_calls(envelope, outcome)
        outcome, parsed = checked_result(outcome)
        if parsed is not None:
            receipt: ReceiptSuccess | ReceiptFailure = ReceiptSuccess(
                result=dict(outcome.result), host_artifact_digest=artifact_digest(parsed)
            )
        else:
            current = self._sessions.load(sid)
            receipt = ReceiptFailure(
                error_kind=(outcome.error_kind.value if outcome.error_kind else "exit_code"),
                exit_code=outcome.exit_code,
                signal=outcome.signal,
                message=failure_reason(outcome)[:2000],
                host_recovery=HostRecoveryRecord(
                    binding=RecoveryBinding(
                        session_id=sid,
                        generation=current.generation,
                        host_kind=current.host_kind,
                        host_session_handle=current.host_session_handle,
                        turn_id=envelope.turn_id,
                        attempt=envelope.attempt,
                    )
                ),
            )
        if (
            isinstance(receipt, ReceiptSuccess)
            and parsed is not None
            and not needs_outside_work(parsed)
        ):
            # Nothing runs outside the database: receipt, write-back and completion
            # are one atomic commit, the second and last fsync of the turn.
            prepared = prepare_write_back(
                self._goal_reader(session), envelope, Path(session.workspace), parsed
            )
            self._commits.outcome(
                session,
                envelope,
                prepared,
                receipt=receipt,
                complete=True,
                artifact_digest=receipt.host_artifact_digest,
                artifact_path=artifact_path(parsed),
                started=started,
            )
            if started:
                crash_point("host.started")
            crash_point("completed")
            # One commit took the turn through these three steps.
            for step in ("receipt", "written_back", "completed"):
                self.spans.reached(envelope.turn_id, step)
        else:
            recorded = RecordReceipt(lease=token, turn_id=envelope.turn_id, receipt=receipt)
            self._commits.session(sid, [*started, recorded])
            if started:
                crash_point("host.started")
            crash_point("receipt")
            self.spans.reached(envelope.turn_id, "receipt")
            if isinstance(receipt, ReceiptSuccess):
                self._complete_from_receipt(self._sessions.load(sid), envelope, receipt, parsed)
            else:  # the receipt's commit failed the turn (``turn.failed``)
                self.spans.reached(envelope.turn_id, "failed", error_kind=receipt.error_kind)
        return TurnResult(
            turn_id=envelope.turn_id, succeeded=isinstance(receipt, ReceiptSuccess), outcome=outcome
        )

    def _goal_reader(self, session: SessionState) -> Callable[[], GoalState]:
        return lambda: self._goals.load(session.goal_id)

    def complete_from_receipt(
        self, session: SessionState, envelope: TurnEnvelope, receipt: ReceiptSuccess
    ) -> EffectsSummary:
        """Steps 5-7 from a durable receipt: what recovery runs after a crash."""
        # A span of its own: the turn's start was the process that died.
        kind, attempt = str(envelope.kind), envelope.attempt
        with self.spans.turn(envelope.turn_id, session.session_id, kind, attempt, recovered=True):
            return self._complete_from_receipt(session, envelope, receipt)

    def _complete_from_receipt(
        self,
        session: SessionState,
        envelope: TurnEnvelope,
        receipt: ReceiptSuccess,
        parsed: AgentResult | None = None,
    ) -> EffectsSummary:
        """Steps 5-7 from a durable receipt. ``parsed`` is the receipt's result as the
        driver validated it (recovery passes none: the durable result is read through
        the model again)."""
        sid = session.session_id
        workspace = Path(session.workspace)
        refusal: MalformedResult | None = None
        if parsed is None:
            try:
                parsed = parse_result(receipt.result)
            except MalformedResult as error:
                refusal = error
        in_flight = session.in_flight
        if in_flight is not None and in_flight.phase == "receipt":
            prepared: PreparedWriteBack = (
                prepare_write_back(self._goal_reader(session), envelope, workspace, parsed)
                if parsed is not None
                else refused_write_back(envelope, refusal or MalformedResult([]))
            )
            self._commits.outcome(
                session, envelope, prepared, receipt=None, complete=False, artifact_digest=None
            )
            crash_point("written_back")
            self.spans.reached(envelope.turn_id, "written_back")
        effects = EffectsSummary()
        if plan_effects(receipt.result, envelope.idempotency_key):
            with self.lease_keeper.keeping(sid):  # a provider may be slow to answer
                effects = self._effects.settle(sid, envelope.turn_id)
        self._commits.complete(
            session, envelope, receipt.host_artifact_digest, artifact_path(parsed)
        )
        crash_point("completed")
        self.spans.reached(envelope.turn_id, "completed")
        return effects

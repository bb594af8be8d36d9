"""Random proposal sequences against the kernel's invariants (hypothesis stateful).

Proposals are drawn from small id pools so that valid and invalid ones both
happen often: claims on blocked todos, stale fences, duplicate ids, closing too
early. After every step the machine checks that the fold of the accepted events
equals the incrementally evolved state, that every event survives a JSON round
trip, and that the audit agrees with the state.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from turnkeeper.errors import FailedPrecondition, TurnkeeperError
from turnkeeper.kernel import (
    GOAL_EVENT_ADAPTER,
    GoalEvent,
    GoalProposal,
    GoalState,
    audit,
    decide_goal,
    evolve_goal,
    fold_goal,
)
from turnkeeper.kernel.audit import BlockerKind, is_terminal
from turnkeeper.kernel.model import (
    UNFINISHED_TODO_STATUSES,
    NoFollowUpReason,
    ObligationStatus,
    TodoStatus,
    TodoTally,
    VisionStatus,
)
from turnkeeper.kernel.proposals import (
    AddMonitor,
    AddTodo,
    BlockTodo,
    ClaimTodo,
    CloseGoal,
    CompleteTodo,
    CreateGoal,
    CriterionSpec,
    Fence,
    Note,
    OpenGate,
    Reassess,
    RecordEvidence,
    RecordNoFollowUp,
    RecordReadback,
    RecordVisionCheckpoint,
    ReleaseClaim,
    RenewClaim,
    ResolveGate,
    RetireMonitor,
    SatisfyCriterion,
    SupersedeTodo,
    TodoSpec,
    UnblockTodo,
    UpdateAcceptance,
)
from turnkeeper.kernel.replan import detect_triggers, needs_successor

from .support import T0

# Each counter of the audit and the blocker kind it counts.
_COUNTER_KINDS = {
    "open_todos": "open_todo",
    "due_monitors": "due_monitor",
    "unresolved_blocking_gates": "unresolved_blocking_gate",
    "pending_successors": "pending_successor",
    "replan_obligations": "replan_obligation",
    "unraised_replan_triggers": "unraised_replan_trigger",
    "acceptance_gaps": "acceptance_gap",
    "retryable_postconditions": "retryable_postcondition",
    "stale_readbacks": "stale_readback",
}

TODOS = st.sampled_from(["t1", "t2", "t3", "t4"])
# (pick, raw): pick 0 uses the raw id (which may not exist), otherwise an existing one.
PICK = st.integers(0, 3)
OWNERS = st.sampled_from(["a", "b"])
KEYS = st.sampled_from(["pytest", "ruff"])
MONITORS = st.sampled_from(["m1", "m2"])
GATES = st.sampled_from(["g1", "g2"])
CRITERIA = st.sampled_from(["c1", "c2", "c3"])
OBLIGATIONS = st.sampled_from([f"obl-{n}" for n in range(1, 6)])
TEXT = st.sampled_from(["", "x", "fix it"])
SECONDS = st.integers(min_value=1, max_value=400)
# Mostly empty, so the other parts of a proposal get a fair chance to be valid.
MAYBE_DISCHARGES: st.SearchStrategy[list[str]] = st.one_of(
    st.just([]), st.lists(OBLIGATIONS, min_size=1, max_size=1)
)
MAYBE_DEPS: st.SearchStrategy[list[str]] = st.one_of(
    st.just([]), st.just([]), st.lists(TODOS, min_size=1, max_size=2)
)
MAYBE_TODO = st.one_of(st.none(), st.none(), TODOS)


class GoalMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state: GoalState | None = None
        self.events: list[GoalEvent] = []
        self.now = T0
        self.evidence_count = 0
        self.last_step_accepted = False

    # --- the step every rule goes through -------------------------------------

    def step(self, proposal: GoalProposal) -> bool:
        before = self.state
        try:
            events = decide_goal(self.state, proposal, self.now)
        except TurnkeeperError:
            # A rejection emits nothing and leaves the state as it was.
            assert self.state is before
            self.last_step_accepted = False
            return False
        assert decide_goal(self.state, proposal, self.now) == events, "decide must be deterministic"
        for event in events:
            assert GOAL_EVENT_ADAPTER.validate_json(GOAL_EVENT_ADAPTER.dump_json(event)) == event
            self.state = evolve_goal(self.state, event)
        self.events += events
        self.last_step_accepted = True
        return True

    def fence(self, todo_id: str, use_current: bool, owner: str, epoch: int) -> Fence:
        claim = (
            self.state.todos[todo_id].claim if self.state and todo_id in self.state.todos else None
        )
        if use_current and claim is not None:
            return Fence(owner=claim.owner, epoch=claim.epoch)
        return Fence(owner=owner, epoch=epoch)

    def existing(self, table: str, pick: int, raw: str) -> str:
        """An id that exists most of the time, so rules reach deep states."""
        ids = sorted(getattr(self.state, table)) if self.state else []
        return ids[pick % len(ids)] if ids and pick else raw

    # --- rules ----------------------------------------------------------------

    @initialize(
        criteria=st.lists(CRITERIA, max_size=2, unique=True),
        vision=st.booleans(),
        todos=st.integers(0, 3),
    )
    def create(self, *, criteria: list[str], vision: bool, todos: int) -> None:
        specs = [CriterionSpec(id=c, text=f"{c} holds") for c in criteria]
        agents = ["planner"] if vision else []
        goal = CreateGoal(goal_id="g", title="goal", criteria=specs, agents_requiring_vision=agents)
        assert self.step(goal)
        # Start with some work so the claim/complete rules reach deep states.
        for n in range(1, todos + 1):
            spec = TodoSpec(todo_id=f"t{n}", title="work", required_evidence=["pytest"][: n % 2])
            assert self.step(AddTodo(todo=spec))

    @rule(
        seconds=SECONDS,
    )
    def advance_time(self, *, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @rule(
        todo=TODOS,
        deps=MAYBE_DEPS,
        keys=st.lists(KEYS, max_size=1, unique=True),
        successor_required=st.booleans(),
        successor_of=MAYBE_TODO,
        discharges=MAYBE_DISCHARGES,
    )
    def add_todo(
        self,
        *,
        todo: str,
        deps: list[str],
        keys: list[str],
        successor_required: bool,
        successor_of: str | None,
        discharges: list[str],
    ) -> None:
        spec = TodoSpec(
            todo_id=todo,
            title=f"do {todo}",
            depends_on=deps,
            required_evidence=keys,
            successor_required=successor_required,
        )
        self.step(AddTodo(todo=spec, successor_of=successor_of, discharges=discharges))

    @rule(pick=PICK, todo=TODOS, owner=OWNERS, lease=SECONDS)
    def claim(self, *, pick: int, todo: str, owner: str, lease: int) -> None:
        todo = self.existing("todos", pick, todo)
        self.step(
            ClaimTodo(
                todo_id=todo, owner=owner, lease_expires_at=self.now + timedelta(seconds=lease)
            )
        )

    @rule(
        pick=PICK,
        todo=TODOS,
        current=st.booleans(),
        owner=OWNERS,
        epoch=st.integers(0, 3),
        lease=SECONDS,
    )
    def renew(
        self, *, pick: int, todo: str, current: bool, owner: str, epoch: int, lease: int
    ) -> None:
        todo = self.existing("todos", pick, todo)
        fence = self.fence(todo, current, owner, epoch)
        self.step(
            RenewClaim(
                todo_id=todo, fence=fence, lease_expires_at=self.now + timedelta(seconds=lease)
            )
        )

    @rule(pick=PICK, todo=TODOS, current=st.booleans(), owner=OWNERS, epoch=st.integers(0, 3))
    def release(self, *, pick: int, todo: str, current: bool, owner: str, epoch: int) -> None:
        todo = self.existing("todos", pick, todo)
        self.step(ReleaseClaim(todo_id=todo, fence=self.fence(todo, current, owner, epoch)))

    @rule(
        pick=PICK,
        todo=TODOS,
        current=st.booleans(),
        owner=OWNERS,
        epoch=st.integers(0, 3),
        all_evidence=st.booleans(),
    )
    def complete(
        self, *, pick: int, todo: str, current: bool, owner: str, epoch: int, all_evidence: bool
    ) -> None:
        todo = self.existing("todos", pick, todo)
        evidence_ids = list(self.state.evidence) if self.state and all_evidence else []
        self.step(
            CompleteTodo(
                todo_id=todo,
                fence=self.fence(todo, current, owner, epoch),
                evidence_ids=evidence_ids,
            )
        )

    @rule(
        pick=PICK,
        todo=TODOS,
        reason=TEXT,
        current=st.booleans(),
        successor=MAYBE_TODO,
        discharges=MAYBE_DISCHARGES,
    )
    def supersede(
        self,
        *,
        pick: int,
        todo: str,
        reason: str,
        current: bool,
        successor: str | None,
        discharges: list[str],
    ) -> None:
        todo = self.existing("todos", pick, todo)
        spec = None if successor is None else TodoSpec(todo_id=successor, title="successor")
        fence = self.fence(todo, current, "a", 1) if current else None
        self.step(
            SupersedeTodo(
                todo_id=todo, reason=reason, fence=fence, successor=spec, discharges=discharges
            )
        )

    @rule(pick=PICK, todo=TODOS, reason=TEXT, current=st.booleans())
    def block(self, *, pick: int, todo: str, reason: str, current: bool) -> None:
        todo = self.existing("todos", pick, todo)
        fence = self.fence(todo, True, "a", 1) if current else None
        self.step(BlockTodo(todo_id=todo, reason=reason, fence=fence))

    @rule(pick=PICK, todo=TODOS)
    def unblock(self, *, pick: int, todo: str) -> None:
        todo = self.existing("todos", pick, todo)
        self.step(UnblockTodo(todo_id=todo))

    @rule(gate=GATES, scope=st.lists(TODOS, max_size=1), blocking=st.booleans())
    def open_gate(self, *, gate: str, scope: list[str], blocking: bool) -> None:
        self.step(OpenGate(gate_id=gate, title="decide", blocking=blocking, scope=scope))

    @rule(pick=PICK, gate=GATES, decision=st.sampled_from(["approved", "rejected", ""]))
    def resolve_gate(self, *, pick: int, gate: str, decision: str) -> None:
        gate = self.existing("gates", pick, gate)
        self.step(ResolveGate(gate_id=gate, by="human", decision=decision, payload={"n": 1}))

    @rule(
        monitor=MONITORS,
        cadence=st.integers(-1, 120),
        required=st.booleans(),
        stall=st.integers(0, 2),
    )
    def add_monitor(self, *, monitor: str, cadence: int, required: bool, stall: int) -> None:
        freshness = 200 if required else None
        self.step(
            AddMonitor(
                monitor_id=monitor,
                target="ci",
                cadence_seconds=cadence,
                stall_limit=stall,
                required=required,
                freshness_seconds=freshness,
            )
        )

    @rule(pick=PICK, monitor=MONITORS, value=st.sampled_from(["pending", "green"]))
    def readback(self, *, pick: int, monitor: str, value: str) -> None:
        monitor = self.existing("monitors", pick, monitor)
        self.step(RecordReadback(monitor_id=monitor, value=value))

    @rule(pick=PICK, monitor=MONITORS)
    def retire_monitor(self, *, pick: int, monitor: str) -> None:
        monitor = self.existing("monitors", pick, monitor)
        self.step(RetireMonitor(monitor_id=monitor, reason="done"))

    @rule(
        key=KEYS,
        exit_code=st.sampled_from([0, 0, 1]),
        freshness=st.sampled_from([0, 300, 3000]),
        reuse_id=st.booleans(),
    )
    def record_evidence(self, *, key: str, exit_code: int, freshness: int, reuse_id: bool) -> None:
        if not reuse_id:
            self.evidence_count += 1
        evidence_id = f"e{max(self.evidence_count, 1)}"
        self.step(
            RecordEvidence(
                evidence_id=evidence_id,
                command=key,
                exit_code=exit_code,
                freshness_seconds=freshness,
            )
        )

    @rule(criterion=CRITERIA, take=st.integers(0, 2))
    def satisfy(self, *, criterion: str, take: int) -> None:
        evidence_ids = list(self.state.evidence)[-take:] if self.state and take else []
        self.step(SatisfyCriterion(criterion_id=criterion, evidence_ids=evidence_ids))

    @rule(criterion=CRITERIA, mode=st.sampled_from(["add", "replace"]), discharges=MAYBE_DISCHARGES)
    def update_acceptance(self, *, criterion: str, mode: str, discharges: list[str]) -> None:
        spec = CriterionSpec(id=criterion, text=f"{criterion} holds")
        self.step(
            UpdateAcceptance(
                mode="add" if mode == "add" else "replace", criteria=[spec], discharges=discharges
            )
        )

    @rule(status=st.sampled_from(list(VisionStatus)), reason=TEXT, discharges=MAYBE_DISCHARGES)
    def vision(self, *, status: VisionStatus, reason: str, discharges: list[str]) -> None:
        self.step(
            RecordVisionCheckpoint(
                agent="planner",
                status=status,
                reason=reason,
                vision_text="v",
                discharges=discharges,
            )
        )
        if discharges and status not in (
            VisionStatus.PATCHED,
            VisionStatus.RETIRED,
            VisionStatus.SUPERSEDED,
        ):
            assert not self.last_step_accepted

    @rule(pick=PICK, discharges=st.lists(OBLIGATIONS, max_size=2))
    def no_follow_up(self, *, pick: int, discharges: list[str]) -> None:
        open_ids = [o.id for o in self.state.open_obligations()] if self.state else []
        if pick and open_ids:
            discharges = open_ids[: pick % 3]
        self.step(
            RecordNoFollowUp(
                reason=NoFollowUpReason.NO_ACTION_NEEDED, summary="ok", discharges=discharges
            )
        )

    @rule(discharges=MAYBE_DISCHARGES)
    def note(self, *, discharges: list[str]) -> None:
        self.step(Note(author="a", text="re-assessed, continuing", discharges=discharges))
        if discharges:
            assert not self.last_step_accepted, "a note must never discharge"

    @rule()
    def reassess(self) -> None:
        self.step(Reassess())

    @rule(commit=st.integers(0, 3))
    def close(self, *, commit: int) -> None:
        """Closing succeeds exactly when the audit says terminal; commit only sometimes."""
        state = self.state
        assert state is not None
        terminal = not state.is_closed and audit(state, self.now).terminal
        proposal = CloseGoal(reason=NoFollowUpReason.ACCEPTANCE_MET, summary="done")
        reason = None
        try:
            decide_goal(state, proposal, self.now)
        except FailedPrecondition as error:
            reason = error.reason
        assert (reason is None) == terminal
        assert reason in (None, "goal_not_terminal", "goal_closed")
        if commit == 3:
            self.step(proposal)

    # --- invariants -----------------------------------------------------------

    @invariant()
    def fold_equals_incremental_state(self) -> None:
        if self.events:
            assert fold_goal(self.events) == self.state
            assert self.state is not None
            assert self.state.version == len(self.events)
            # The state is a projection the store may persist: JSON must be lossless too.
            assert GoalState.model_validate_json(self.state.model_dump_json()) == self.state

    @invariant()
    def carried_tally_equals_a_fresh_count(self) -> None:
        # The replan triggers read a tally evolve carries from state to state; a state
        # read afresh counts its own. Both must raise the same triggers, in one order.
        if self.state is None:
            return
        afresh = GoalState.model_validate_json(self.state.model_dump_json())
        carried, counted = self.state.todo_tally(), TodoTally.of(afresh.todos.values())
        todos = list(afresh.todos.values())
        relied = Counter(
            k for t in todos if t.status is TodoStatus.DONE for k in set(t.required_evidence)
        )
        for tally in (carried, counted):
            assert tally.counts == Counter(t.status for t in todos)
            # Goal order too: the planner starts the first runnable one.
            assert list(tally.unfinished) == [
                t.id for t in todos if t.status in UNFINISHED_TODO_STATUSES
            ]
            assert tally.relied == relied
            assert tally.successor_needed == {t.id for t in todos if needs_successor(t)}
        assert detect_triggers(self.state, self.now) == detect_triggers(afresh, self.now)

    @invariant()
    def audit_agrees_with_state(self) -> None:
        if self.state is None:
            return
        state, report = self.state, audit(self.state, self.now)
        by_kind = Counter(b.kind for b in report.blockers)
        unfinished = sum(t.status in UNFINISHED_TODO_STATUSES for t in state.todos.values())
        assert report.open_todos == unfinished == by_kind[BlockerKind.OPEN_TODO]
        assert report.replan_obligations == len(state.open_obligations())
        assert report.unresolved_blocking_gates == by_kind[BlockerKind.UNRESOLVED_BLOCKING_GATE]
        assert report.acceptance_gaps >= sum(not c.met for c in state.goal.criteria)
        counters = report.model_dump(exclude={"blockers", "terminal"})
        assert sum(counters.values()) == len(report.blockers)
        assert report.terminal == (len(report.blockers) == 0)
        # The planner's short cut stops at the first blocker: the same answer.
        assert is_terminal(state, self.now) == report.terminal
        assert report.counters() == {
            name: by_kind[BlockerKind(kind)] for name, kind in _COUNTER_KINDS.items()
        }

    @invariant()
    def claims_match_status(self) -> None:
        if self.state is None:
            return
        for todo in self.state.todos.values():
            assert (todo.claim is not None) == (todo.status is TodoStatus.CLAIMED)
            if todo.claim is not None:
                assert todo.claim.epoch == todo.epoch >= 1

    @invariant()
    def at_most_one_open_obligation_per_trigger_and_subject(self) -> None:
        if self.state is None:
            return
        open_keys = [
            (o.trigger, o.subject)
            for o in self.state.obligations.values()
            if o.status is ObligationStatus.OPEN
        ]
        assert len(open_keys) == len(set(open_keys))


GoalMachine.TestCase.settings = settings(
    max_examples=80,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGoalMachine = GoalMachine.TestCase

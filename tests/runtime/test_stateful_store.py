"""Random proposal sequences through the real service and a real SQLite file.

After every step: each stream's sequence numbers are 1..n with no gap, every
record passes its checksum, the stored projection equals the fold of the
stream's events, and a rejected proposal left the log untouched.
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from turnkeeper.errors import TurnkeeperError
from turnkeeper.kernel import fold_goal
from turnkeeper.kernel.model import NoFollowUpReason
from turnkeeper.kernel.proposals import (
    AddMonitor,
    AddTodo,
    ClaimTodo,
    CloseGoal,
    CompleteTodo,
    CreateGoal,
    Fence,
    GoalProposal,
    OpenGate,
    Reassess,
    RecordEvidence,
    RecordReadback,
    ReleaseClaim,
    ResolveGate,
    SupersedeTodo,
    TodoSpec,
)
from turnkeeper.runtime.services.folder import kernel_folder
from turnkeeper.runtime.services.goals import GOAL_CODEC, GoalService, goal_stream
from turnkeeper.store import EventStore, open_store

GOALS = ["g1", "g2"]
TODOS = ["t1", "t2", "t3"]
OWNERS = ["ann", "bob"]


class ServiceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.store: EventStore = open_store(f"sqlite:///{Path(self.dir.name) / 'state.db'}")
        self.now = datetime(2026, 1, 1, tzinfo=UTC)
        self.goals = GoalService(self.store, clock=lambda: self.now)
        self.created: set[str] = set()
        self.counter = 0

    def teardown(self) -> None:
        self.store.close()
        self.dir.cleanup()

    def _submit(self, goal_id: str, proposal: GoalProposal) -> None:
        stream = goal_stream(goal_id)
        before = self.store.head(stream)
        try:
            done = self.goals.submit(goal_id, proposal)
        except TurnkeeperError:
            assert self.store.head(stream) == before, "a rejected proposal wrote events"
            return
        assert done.head_seq == before + len(done.events)

    def _next_id(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    @rule(goal=st.sampled_from(GOALS))
    def create(self, goal: str) -> None:
        self._submit(goal, CreateGoal(goal_id=goal, title=f"goal {goal}"))
        self.created.add(goal)

    @precondition(lambda self: bool(self.created))
    @rule(goal=st.sampled_from(GOALS), todo=st.sampled_from(TODOS), needs=st.booleans())
    def add_todo(self, goal: str, todo: str, needs: bool) -> None:
        spec = TodoSpec(
            todo_id=f"{goal}-{todo}", title=todo, required_evidence=["k"] if needs else []
        )
        self._submit(goal, AddTodo(todo=spec))

    @rule(
        goal=st.sampled_from(GOALS),
        todo=st.sampled_from(TODOS),
        owner=st.sampled_from(OWNERS),
        minutes=st.integers(1, 30),
    )
    def claim(self, goal: str, todo: str, owner: str, minutes: int) -> None:
        lease = self.now + timedelta(minutes=minutes)
        self._submit(goal, ClaimTodo(todo_id=f"{goal}-{todo}", owner=owner, lease_expires_at=lease))

    @rule(
        goal=st.sampled_from(GOALS),
        todo=st.sampled_from(TODOS),
        owner=st.sampled_from(OWNERS),
        epoch=st.integers(0, 3),
        release=st.booleans(),
    )
    def finish_or_release(
        self, goal: str, todo: str, owner: str, epoch: int, release: bool
    ) -> None:
        fence = Fence(owner=owner, epoch=epoch)
        tid = f"{goal}-{todo}"
        evidence = [f"ev{n}" for n in range(1, self.counter + 1)]
        proposal: GoalProposal = (
            ReleaseClaim(todo_id=tid, fence=fence)
            if release
            else CompleteTodo(todo_id=tid, fence=fence, evidence_ids=evidence[-2:])
        )
        self._submit(goal, proposal)

    @rule(goal=st.sampled_from(GOALS), todo=st.sampled_from(TODOS))
    def supersede(self, goal: str, todo: str) -> None:
        successor = TodoSpec(todo_id=self._next_id("s"), title="successor")
        self._submit(
            goal, SupersedeTodo(todo_id=f"{goal}-{todo}", reason="replan", successor=successor)
        )

    @rule(goal=st.sampled_from(GOALS), code=st.sampled_from([0, 0, 1]))
    def evidence(self, goal: str, code: int) -> None:
        eid = self._next_id("ev")
        self._submit(
            goal,
            RecordEvidence(
                evidence_id=eid,
                command="make check",
                key="k",
                exit_code=code,
                freshness_seconds=600,
            ),
        )

    @rule(goal=st.sampled_from(GOALS), resolve=st.booleans())
    def gate(self, goal: str, resolve: bool) -> None:
        if resolve:
            self._submit(goal, ResolveGate(gate_id=f"{goal}-gate", by="ann", decision="approved"))
        else:
            self._submit(goal, OpenGate(gate_id=f"{goal}-gate", title="approve"))

    @rule(goal=st.sampled_from(GOALS), value=st.sampled_from(["a", "b"]), add=st.booleans())
    def monitor(self, goal: str, value: str, add: bool) -> None:
        mid = f"{goal}-mon"
        if add:
            self._submit(goal, AddMonitor(monitor_id=mid, target="ci", cadence_seconds=60))
        else:
            self._submit(goal, RecordReadback(monitor_id=mid, value=value))

    @rule(goal=st.sampled_from(GOALS))
    def reassess_or_close(self, goal: str) -> None:
        self._submit(goal, Reassess())
        self._submit(goal, CloseGoal(reason=NoFollowUpReason.ACCEPTANCE_MET, summary="done"))

    @rule(minutes=st.integers(1, 60))
    def advance_clock(self, minutes: int) -> None:
        self.now += timedelta(minutes=minutes)

    @invariant()
    def log_and_projections_agree(self) -> None:
        for goal in self.created:
            stream = goal_stream(goal)
            records = self.store.read_stream(stream)  # checksums verified on read
            assert [r.seq for r in records] == list(range(1, len(records) + 1))
            # The projection may lag its stream (a large goal's is snapshotted every so
            # many appends): it is the fold of the events up to its head, never past.
            projection = self.store.read_projection(stream)
            assert projection is not None and 1 <= projection.head_seq <= len(records)
            folded = fold_goal(GOAL_CODEC.decode_event(r) for r in records[: projection.head_seq])
            assert GOAL_CODEC.decode_state(stream, projection.state) == folded

    @invariant()
    def check_verify(self) -> None:
        assert self.store.verify(kernel_folder()).ok


ServiceMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=25, deadline=None)
TestServiceStateful = ServiceMachine.TestCase


def test_verify_is_clean_after_a_random_run(tmp_path: Path) -> None:
    machine = ServiceMachine()
    try:
        machine.create("g1")
        machine.add_todo("g1", "t1", needs=True)
        machine.claim("g1", "t1", "ann", 10)
        machine.evidence("g1", 0)
        machine.finish_or_release("g1", "t1", "ann", 1, release=False)
        machine.log_and_projections_agree()
        machine.check_verify()
        state = machine.goals.load("g1")
        assert state.todos["g1-t1"].status.value == "done"
    finally:
        machine.teardown()

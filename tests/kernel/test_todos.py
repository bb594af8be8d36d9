"""Todo transitions: add, claim (lease + epoch fencing), renew, release, complete,
supersede, block, unblock."""

from __future__ import annotations

from datetime import datetime

import pytest

from turnkeeper.errors import Aborted, AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from turnkeeper.kernel import GoalProposal
from turnkeeper.kernel.events import (
    ClaimReleased,
    ClaimRenewed,
    TodoAdded,
    TodoBlocked,
    TodoClaimed,
    TodoCompleted,
    TodoSuperseded,
    TodoUnblocked,
)
from turnkeeper.kernel.model import TodoStatus
from turnkeeper.kernel.proposals import (
    AddTodo,
    BlockTodo,
    ClaimTodo,
    CompleteTodo,
    Fence,
    OpenGate,
    ReleaseClaim,
    RenewClaim,
    ResolveGate,
    SupersedeTodo,
    TodoSpec,
    UnblockTodo,
)

from .support import T0, Goal, add_todo, at, claim, evidence, new_goal


def _goal_with_todo(required_evidence: tuple[str, ...] = ()) -> Goal:
    goal = new_goal(criteria=())
    add_todo(goal, "t1", required_evidence=required_evidence)
    return goal


# --- add ------------------------------------------------------------------------


def test_add_todo_emits_todo_added() -> None:
    goal = new_goal(criteria=())
    assert add_todo(goal, "t1", required_evidence=("pytest",)) == [
        TodoAdded(
            todo_id="t1",
            title="do t1",
            depends_on=[],
            required_evidence=["pytest"],
            successor_required=False,
            successor_of=None,
            at=T0,
        )
    ]
    assert goal.s.todos["t1"].status is TodoStatus.OPEN


def test_add_todo_rejections() -> None:
    goal = _goal_with_todo()
    goal.reject(AddTodo(todo=TodoSpec(todo_id="t1", title="x")), AlreadyExists, "todo_exists")
    goal.reject(AddTodo(todo=TodoSpec(todo_id="t2", title="")), InvalidArgument, "empty_text")
    goal.reject(
        AddTodo(todo=TodoSpec(todo_id="t2", title="x", depends_on=["zz"])),
        NotFound,
        "todo_not_found",
    )
    goal.reject(
        AddTodo(todo=TodoSpec(todo_id="t2", title="x", depends_on=["t2"])),
        InvalidArgument,
        "self_dependency",
    )
    goal.reject(
        AddTodo(todo=TodoSpec(todo_id="t2", title="x", depends_on=["t1", "t1"])),
        InvalidArgument,
        "duplicate_value",
    )
    goal.reject(
        AddTodo(todo=TodoSpec(todo_id="t2", title="x"), successor_of="zz"),
        NotFound,
        "todo_not_found",
    )
    goal.reject(
        AddTodo(todo=TodoSpec(todo_id="t2", title="x"), discharges=["obl-9"]),
        NotFound,
        "obligation_not_found",
    )


def test_add_successor_links_both_ways() -> None:
    goal = _goal_with_todo()
    goal.apply(AddTodo(todo=TodoSpec(todo_id="t2", title="next"), successor_of="t1"))
    assert goal.s.todos["t1"].successors == ["t2"]
    assert goal.s.todos["t2"].successor_of == "t1"


# --- claim ----------------------------------------------------------------------


def test_claim_open_todo_starts_epoch_one() -> None:
    goal = _goal_with_todo()
    events = goal.apply(ClaimTodo(todo_id="t1", owner="a", lease_expires_at=at(60)))
    assert events == [
        TodoClaimed(
            todo_id="t1", owner="a", epoch=1, lease_expires_at=at(60), taken_over_from=None, at=T0
        )
    ]
    todo = goal.s.todos["t1"]
    assert todo.status is TodoStatus.CLAIMED
    assert todo.claim is not None
    assert todo.claim.epoch == 1


def test_claim_under_live_lease_of_another_owner_is_aborted() -> None:
    goal = _goal_with_todo()
    claim(goal, "t1", "a")
    error = goal.reject(
        ClaimTodo(todo_id="t1", owner="b", lease_expires_at=at(90)),
        Aborted,
        "lease_held",
        now=at(59),
    )
    assert error.details["owner"] == "a"


def test_expired_lease_is_taken_over_with_next_epoch() -> None:
    goal = _goal_with_todo()
    claim(goal, "t1", "a")
    events = goal.apply(ClaimTodo(todo_id="t1", owner="b", lease_expires_at=at(200)), at(60))
    assert events == [
        TodoClaimed(
            todo_id="t1",
            owner="b",
            epoch=2,
            lease_expires_at=at(200),
            taken_over_from="a",
            at=at(60),
        )
    ]


def test_same_owner_reclaim_gets_a_new_epoch_and_fences_the_old_one() -> None:
    goal = _goal_with_todo()
    old = claim(goal, "t1", "a")
    new = claim(goal, "t1", "a", now=at(1))
    assert new.epoch == old.epoch + 1
    goal.reject(ReleaseClaim(todo_id="t1", fence=old), Aborted, "stale_epoch", now=at(2))


def test_release_then_claim_gets_next_epoch() -> None:
    goal = _goal_with_todo()
    fence = claim(goal, "t1", "a")
    goal.apply(ReleaseClaim(todo_id="t1", fence=fence))
    assert claim(goal, "t1", "b").epoch == 2


@pytest.mark.parametrize(
    ("lease", "reason"), [(T0, "lease_not_in_future"), (datetime(2025, 2, 1), "naive_datetime")]
)
def test_claim_rejects_bad_lease(lease: datetime, reason: str) -> None:
    goal = _goal_with_todo()
    goal.reject(ClaimTodo(todo_id="t1", owner="a", lease_expires_at=lease), InvalidArgument, reason)


def test_claim_rejections_by_state() -> None:
    goal = _goal_with_todo()
    goal.reject(
        ClaimTodo(todo_id="zz", owner="a", lease_expires_at=at(9)), NotFound, "todo_not_found"
    )
    goal.reject(
        ClaimTodo(todo_id="t1", owner="", lease_expires_at=at(9)), InvalidArgument, "empty_text"
    )
    add_todo(goal, "t2", depends_on=("t1",))
    error = goal.reject(
        ClaimTodo(todo_id="t2", owner="a", lease_expires_at=at(9)),
        FailedPrecondition,
        "dependency_unmet",
    )
    assert error.details["pending"] == ["t1"]
    goal.apply(BlockTodo(todo_id="t1", reason="waiting for creds"))
    goal.reject(
        ClaimTodo(todo_id="t1", owner="a", lease_expires_at=at(9)),
        FailedPrecondition,
        "todo_blocked",
    )


def test_claim_refused_in_scope_of_unresolved_blocking_gate() -> None:
    goal = _goal_with_todo()
    add_todo(goal, "t2")
    goal.apply(OpenGate(gate_id="g", title="approve", scope=["t1"]))
    error = goal.reject(
        ClaimTodo(todo_id="t1", owner="a", lease_expires_at=at(9)),
        FailedPrecondition,
        "gate_blocks",
    )
    assert error.details["gates"] == ["g"]
    claim(goal, "t2")  # outside the scope
    goal.apply(ResolveGate(gate_id="g", by="human", decision="approved"))
    claim(goal, "t1")


def test_whole_goal_gate_blocks_every_claim_and_non_blocking_gate_none() -> None:
    goal = _goal_with_todo()
    goal.apply(OpenGate(gate_id="info", title="fyi", blocking=False))
    claim(goal, "t1")
    add_todo(goal, "t2")
    goal.apply(OpenGate(gate_id="all", title="freeze"))
    goal.reject(
        ClaimTodo(todo_id="t2", owner="a", lease_expires_at=at(9)),
        FailedPrecondition,
        "gate_blocks",
    )


def test_dependency_met_through_superseded_todo_with_done_successor() -> None:
    goal = _goal_with_todo()
    add_todo(goal, "t3", depends_on=("t1",))
    goal.apply(
        SupersedeTodo(
            todo_id="t1", reason="split", successor=TodoSpec(todo_id="t2", title="better")
        )
    )
    goal.reject(
        ClaimTodo(todo_id="t3", owner="a", lease_expires_at=at(9)),
        FailedPrecondition,
        "dependency_unmet",
    )
    fence = claim(goal, "t2")
    goal.apply(CompleteTodo(todo_id="t2", fence=fence))
    claim(goal, "t3")


def test_claim_on_done_todo_is_todo_closed() -> None:
    goal = _goal_with_todo()
    goal.apply(CompleteTodo(todo_id="t1", fence=claim(goal, "t1")))
    goal.reject(
        ClaimTodo(todo_id="t1", owner="a", lease_expires_at=at(9)),
        FailedPrecondition,
        "todo_closed",
    )


# --- renew / release ------------------------------------------------------------


def test_renew_extends_the_lease_even_after_expiry_if_not_taken_over() -> None:
    goal = _goal_with_todo()
    fence = claim(goal, "t1")
    events = goal.apply(RenewClaim(todo_id="t1", fence=fence, lease_expires_at=at(500)), at(100))
    assert events == [
        ClaimRenewed(todo_id="t1", owner="a", epoch=1, lease_expires_at=at(500), at=at(100))
    ]
    claim_ = goal.s.todos["t1"].claim
    assert claim_ is not None
    assert claim_.lease_expires_at == at(500)


def test_fenced_proposals_reject_stale_epoch_and_other_owner() -> None:
    goal = _goal_with_todo()
    old = claim(goal, "t1", "a")
    claim(goal, "t1", "b", now=at(61))
    stale: list[GoalProposal] = [
        RenewClaim(todo_id="t1", fence=old, lease_expires_at=at(200)),
        ReleaseClaim(todo_id="t1", fence=old),
        CompleteTodo(todo_id="t1", fence=old),
        SupersedeTodo(todo_id="t1", reason="x", fence=old),
        BlockTodo(todo_id="t1", reason="x", fence=old),
        ReleaseClaim(todo_id="t1", fence=Fence(owner="a", epoch=2)),
    ]
    for proposal in stale:
        goal.reject(proposal, Aborted, "stale_epoch", now=at(62))


def test_fenced_proposals_on_unclaimed_todo() -> None:
    goal = _goal_with_todo()
    fence = Fence(owner="a", epoch=1)
    goal.reject(ReleaseClaim(todo_id="t1", fence=fence), FailedPrecondition, "not_claimed")
    goal.reject(CompleteTodo(todo_id="t1", fence=fence), FailedPrecondition, "not_claimed")
    goal.reject(
        RenewClaim(todo_id="zz", fence=fence, lease_expires_at=at(9)), NotFound, "todo_not_found"
    )


def test_release_returns_todo_to_open() -> None:
    goal = _goal_with_todo()
    fence = claim(goal, "t1")
    assert goal.apply(ReleaseClaim(todo_id="t1", fence=fence), at(1)) == [
        ClaimReleased(todo_id="t1", owner="a", epoch=1, at=at(1))
    ]
    assert goal.s.todos["t1"].status is TodoStatus.OPEN
    assert goal.s.todos["t1"].claim is None


# --- complete -------------------------------------------------------------------


def test_complete_with_required_evidence() -> None:
    goal = _goal_with_todo(required_evidence=("pytest",))
    evidence(goal, "e1")
    fence = claim(goal, "t1")
    events = goal.apply(
        CompleteTodo(todo_id="t1", fence=fence, evidence_ids=["e1"], current_revision="rev1"),
        at(10),
    )
    assert events == [
        TodoCompleted(todo_id="t1", owner="a", epoch=1, evidence_ids=["e1"], at=at(10))
    ]
    todo = goal.s.todos["t1"]
    assert todo.status is TodoStatus.DONE
    assert todo.completion is not None
    assert todo.completion.evidence_ids == ["e1"]


@pytest.mark.parametrize(
    ("exit_code", "now", "revision", "offered", "reason"),
    [
        (0, at(10), None, [], "evidence_missing"),
        (1, at(10), None, ["e1"], "evidence_failed"),
        (0, at(601), None, ["e1"], "evidence_stale"),
        (0, at(10), "rev2", ["e1"], "evidence_stale"),
    ],
)
def test_complete_refused_without_usable_evidence(
    exit_code: int, now: datetime, revision: str | None, offered: list[str], reason: str
) -> None:
    goal = _goal_with_todo(required_evidence=("pytest",))
    evidence(goal, "e1", exit_code=exit_code)
    fence = claim(goal, "t1", now=T0, lease=1000)
    goal.reject(
        CompleteTodo(todo_id="t1", fence=fence, evidence_ids=offered, current_revision=revision),
        FailedPrecondition,
        reason,
        now=now,
    )


def test_complete_with_wrong_key_is_missing_and_unknown_id_not_found() -> None:
    goal = _goal_with_todo(required_evidence=("pytest",))
    evidence(goal, "e1", key="ruff")
    fence = claim(goal, "t1")
    goal.reject(
        CompleteTodo(todo_id="t1", fence=fence, evidence_ids=["e1"]),
        FailedPrecondition,
        "evidence_missing",
    )
    goal.reject(
        CompleteTodo(todo_id="t1", fence=fence, evidence_ids=["e9"]), NotFound, "evidence_not_found"
    )


def test_complete_accepts_when_one_of_several_records_is_usable() -> None:
    goal = _goal_with_todo(required_evidence=("pytest",))
    evidence(goal, "bad", exit_code=1)
    evidence(goal, "good")
    fence = claim(goal, "t1")
    goal.apply(CompleteTodo(todo_id="t1", fence=fence, evidence_ids=["bad", "good"]))


# --- supersede ------------------------------------------------------------------


def test_supersede_with_successor() -> None:
    goal = _goal_with_todo()
    events = goal.apply(
        SupersedeTodo(
            todo_id="t1", reason="wrong approach", successor=TodoSpec(todo_id="t2", title="right")
        ),
        at(3),
    )
    assert events == [
        TodoSuperseded(todo_id="t1", reason="wrong approach", at=at(3)),
        TodoAdded(
            todo_id="t2",
            title="right",
            depends_on=[],
            required_evidence=[],
            successor_required=False,
            successor_of="t1",
            at=at(3),
        ),
    ]
    assert goal.s.todos["t1"].status is TodoStatus.SUPERSEDED
    assert goal.s.todos["t1"].successors == ["t2"]


def test_supersede_rejections() -> None:
    goal = _goal_with_todo()
    goal.reject(SupersedeTodo(todo_id="t1", reason=""), InvalidArgument, "empty_text")
    goal.reject(SupersedeTodo(todo_id="zz", reason="x"), NotFound, "todo_not_found")
    goal.reject(
        SupersedeTodo(todo_id="t1", reason="x", successor=TodoSpec(todo_id="t1", title="x")),
        AlreadyExists,
        "todo_exists",
    )
    fence = claim(goal, "t1")
    goal.reject(SupersedeTodo(todo_id="t1", reason="x"), FailedPrecondition, "fence_required")
    goal.apply(SupersedeTodo(todo_id="t1", reason="x", fence=fence))
    goal.reject(SupersedeTodo(todo_id="t1", reason="x"), FailedPrecondition, "todo_closed")


# --- block / unblock ------------------------------------------------------------


def test_block_and_unblock() -> None:
    goal = _goal_with_todo()
    fence = claim(goal, "t1")
    goal.reject(BlockTodo(todo_id="t1", reason="creds"), FailedPrecondition, "fence_required")
    assert goal.apply(BlockTodo(todo_id="t1", reason="creds", fence=fence)) == [
        TodoBlocked(todo_id="t1", reason="creds", at=T0)
    ]
    assert goal.s.todos["t1"].claim is None
    goal.reject(BlockTodo(todo_id="t1", reason="again"), FailedPrecondition, "todo_blocked")
    assert goal.apply(UnblockTodo(todo_id="t1")) == [TodoUnblocked(todo_id="t1", at=T0)]
    assert goal.s.todos["t1"].status is TodoStatus.OPEN
    goal.reject(UnblockTodo(todo_id="t1"), FailedPrecondition, "todo_not_blocked")
    goal.reject(UnblockTodo(todo_id="zz"), NotFound, "todo_not_found")
    goal.reject(BlockTodo(todo_id="t1", reason=""), InvalidArgument, "empty_text")

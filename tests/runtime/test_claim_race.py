"""Two real OS processes race to claim the same todo, many times: exactly one wins."""

from __future__ import annotations

import multiprocessing as mp
from datetime import timedelta
from multiprocessing.synchronize import Barrier
from pathlib import Path

from turnkeeper.errors import Aborted
from turnkeeper.kernel.proposals import AddTodo, ClaimTodo, CreateGoal, TodoSpec
from turnkeeper.runtime.services.goals import GoalService, utc_now
from turnkeeper.store import open_store

ROUNDS = 40


def _claimer(
    url: str, owner: str, barrier: Barrier, results: mp.Queue[tuple[str, int, str]]
) -> None:
    store = open_store(url)
    goals = GoalService(store)
    try:
        for round_no in range(ROUNDS):
            barrier.wait(timeout=60)  # both processes start each claim together
            lease = utc_now() + timedelta(minutes=5)
            try:
                goals.submit(
                    "g", ClaimTodo(todo_id=f"t{round_no}", owner=owner, lease_expires_at=lease)
                )
                results.put((owner, round_no, "won"))
            except Aborted as error:
                results.put((owner, round_no, error.reason))
    finally:
        store.close()


def test_two_processes_claim_one_todo_exactly_one_wins(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'race.db'}"
    store = open_store(url)
    goals = GoalService(store)
    goals.create(CreateGoal(goal_id="g", title="race"))
    for round_no in range(ROUNDS):
        goals.submit("g", AddTodo(todo=TodoSpec(todo_id=f"t{round_no}", title=f"todo {round_no}")))
    store.close()

    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    results: mp.Queue[tuple[str, int, str]] = ctx.Queue()
    procs = [ctx.Process(target=_claimer, args=(url, who, barrier, results)) for who in ("a", "b")]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=120) for _ in range(2 * ROUNDS)]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0

    by_round: dict[int, list[tuple[str, str]]] = {}
    for owner, round_no, outcome in outcomes:
        by_round.setdefault(round_no, []).append((owner, outcome))
    for round_no in range(ROUNDS):
        verdicts = sorted(outcome for _, outcome in by_round[round_no])
        assert verdicts == ["lease_held", "won"], (round_no, by_round[round_no])

    store = open_store(url)
    try:
        state = GoalService(store).load("g")
        winners = {owner for owner, _, outcome in outcomes if outcome == "won"}
        for round_no in range(ROUNDS):
            claim = state.todos[f"t{round_no}"].claim
            assert claim is not None and claim.epoch == 1 and claim.owner in winners
        claimed = [r for r in store.read_stream("goal:g") if r.type == "todo_claimed"]
        assert len(claimed) == ROUNDS  # one claim event per todo: the loser wrote nothing
    finally:
        store.close()

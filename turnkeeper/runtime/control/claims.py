"""Giving back the todo claims of a session that stopped working.

A session claims its todo for the length of a host turn plus a lease (an hour and
more by default). A session that is stopped, suspended or crashed does no more work
until someone resumes it, so keeping its claims would lock its todos away from every
other agent and person for that hour: they are released when it stops, and the next
turn of a resumed session claims again (with a new epoch that fences anything the
stopped turn might still try to write).
"""

from __future__ import annotations

from turnkeeper.errors import TurnkeeperError
from turnkeeper.kernel.model import TodoStatus
from turnkeeper.kernel.proposals import Fence, ReleaseClaim
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.turn.writeback import claim_owner


def release_session_claims(goals: GoalService, goal_id: str, session_id: str) -> list[str]:
    """Release every live claim ``session_id`` holds on its goal; the todo ids released."""
    owner = claim_owner(session_id)
    goal = goals.load(goal_id)
    if goal.is_closed:
        return []
    released: list[str] = []
    for todo in goal.todos.values():
        claim = todo.claim
        if todo.status is not TodoStatus.CLAIMED or claim is None or claim.owner != owner:
            continue
        try:
            goals.submit(
                goal_id, ReleaseClaim(todo_id=todo.id, fence=Fence(owner=owner, epoch=claim.epoch))
            )
        except TurnkeeperError as error:
            # Released or claimed anew meanwhile: it is not ours to release any more.
            if error.reason not in ("stale_epoch", "not_claimed"):
                raise
            continue
        released.append(todo.id)
    return released

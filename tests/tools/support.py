"""A goal, a turn and its open channel for the tools' tests, built through the kernel."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from turnkeeper.brief import GoalBrief, StopConditions, TurnBrief
from turnkeeper.hosts.base import ToolServer
from turnkeeper.kernel import GoalProposal, GoalState, decide_goal, evolve_goal
from turnkeeper.kernel.proposals import (
    AddTodo,
    ClaimTodo,
    CreateGoal,
    CriterionSpec,
    TodoSpec,
)
from turnkeeper.tools.channel import ChannelTurn, ToolChannels
from turnkeeper.vocabulary import TurnKind

SESSION = "s-1"
OWNER = f"session:{SESSION}"
GOAL = "g1"


def apply(state: GoalState | None, proposal: GoalProposal, now: datetime) -> GoalState:
    after = state
    for event in decide_goal(state, proposal, now):
        after = evolve_goal(after, event)
    assert after is not None
    return after


def claimed_goal(
    *,
    todo: str = "t1",
    required_evidence: tuple[str, ...] = ("tests",),
    agents: tuple[str, ...] = (),
) -> GoalState:
    """A goal with criterion c1 and todo ``todo`` claimed by the session, as of now (the
    dry runs use the real clock, so the claim's lease must still run)."""
    now = datetime.now(UTC) - timedelta(seconds=1)
    state = apply(
        None,
        CreateGoal(
            goal_id=GOAL,
            title="Ship the parser",
            objective="the parser works",
            criteria=[CriterionSpec(id="c1", text="parser tests pass")],
            agents_requiring_vision=list(agents),
        ),
        now,
    )
    spec = TodoSpec(
        todo_id=todo, title="Write the tokenizer", required_evidence=list(required_evidence)
    )
    state = apply(state, AddTodo(todo=spec), now)
    state = apply(
        state,
        ClaimTodo(todo_id=todo, owner=OWNER, lease_expires_at=now + timedelta(hours=1)),
        now,
    )
    return state


def turn(workspace: Path, turn_id: str = "turn-0001", todo: str | None = "t1") -> ChannelTurn:
    return ChannelTurn(
        turn_id=turn_id,
        session_id=SESSION,
        goal_id=GOAL,
        todo_id=todo,
        claim_owner=OWNER,
        claim_epoch=1 if todo else None,
        workspace=workspace,
    )


def brief(turn_id: str = "turn-0001") -> TurnBrief:
    return TurnBrief(
        turn_id=turn_id,
        session_id=SESSION,
        kind=TurnKind.START,
        attempt=1,
        goal=GoalBrief(id=GOAL, title="Ship the parser"),
        stop=StopConditions(stop_condition="Stop when the todo is done.", attempt=1),
    )


@dataclass
class Opened:
    channels: ToolChannels
    turn: ChannelTurn
    server: ToolServer

    @property
    def folder(self) -> Path:
        return self.channels.path(self.turn.turn_id)

    @property
    def calls_file(self) -> Path:
        return self.folder / "calls.jsonl"


def open_channel(
    root: Path,
    workspace: Path,
    *,
    turn_id: str = "turn-0001",
    goal: GoalState | None = None,
    todo: str | None = "t1",
) -> Opened:
    channels = ToolChannels(root)
    t = turn(workspace, turn_id, todo)
    server = channels.open(t, brief(turn_id), goal if goal is not None else claimed_goal())
    return Opened(channels, t, server)


TIMEOUT = 60.0
# What a test does with a started tool server.
Session = Callable[[ClientSession], Awaitable[None]]


def serve_tools(env: dict[str, str], workspace: Path, session: Session) -> None:
    """Start ``turnkeeper mcp`` as an agent CLI would, and run ``session`` against it."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "turnkeeper.cli.main", "mcp"],
        env=env,
        cwd=workspace,
    )

    async def main() -> None:
        with anyio.fail_after(TIMEOUT):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
                init = await client.initialize()
                assert init.server_info.name == "turnkeeper"
                assert init.instructions is not None and "turnkeeper" in init.instructions
                await session(client)

    anyio.run(main)

"""A turn's agent side: the brief it is given and the tool channel it reports through.

The driver (runtime/turn/driver.py) runs the turn transaction; this module is what
the agent meets of it. Before the turn is accepted, :meth:`AgentSide.brief` builds
the turn's brief (runtime/turn/brief.py) from the durable state; once its claim is
committed, :meth:`AgentSide.tool_server` opens the turn's tool channel
(turnkeeper/tools/channel.py) and names the server that reaches it; when the host
has ended, :meth:`AgentSide.with_tool_calls` closes the channel and adds the calls
journaled there to the host's result, so they reach the durable receipt and the
write-back like any result (a crash before the receipt applies none of them).
"""

from __future__ import annotations

from dataclasses import dataclass

from turnkeeper.brief import TurnBrief
from turnkeeper.hosts.base import HostOutcome, ToolServer
from turnkeeper.kernel import GoalState
from turnkeeper.kernel.session import InteractionContract, NextTurn, SessionState, TurnEnvelope
from turnkeeper.runtime.services.goals import GoalService
from turnkeeper.runtime.services.sessions import SessionService
from turnkeeper.runtime.services.turn_listing import recent_turn
from turnkeeper.runtime.turn.brief import AgentLimits, build_brief
from turnkeeper.runtime.turn.writeback import claim_owner
from turnkeeper.runtime.workspaces.workspace import workspace_path
from turnkeeper.tools.calls import TOOL_NAMES, merge_calls
from turnkeeper.tools.channel import ChannelTurn, GoalHistory, ToolChannels


@dataclass(frozen=True)
class AgentSide:
    sessions: SessionService
    goals: GoalService
    # The turns' tool channels (one object for the run: it paces its pruning); None:
    # agents get no turnkeeper tools.
    channels: ToolChannels | None
    # The bounds the agent is told.
    limits: AgentLimits

    def brief(
        self,
        session: SessionState,
        turn_id: str,
        spec: NextTurn,
        contract: InteractionContract,
        goal: GoalState,
    ) -> TurnBrief:
        """What the agent of turn ``turn_id`` (planned as ``spec``) is told: the durable
        state as of now, the workspace probed now, and what the previous turn left."""
        ended = session.last_turn_end
        previous = (
            recent_turn(self.sessions.store, session.session_id, ended.turn_id)
            if ended is not None
            else None
        )
        channels = self.channels
        unapplied: list[str] = []
        if channels is not None and ended is not None and ended.outcome in ("lost", "failed"):
            # None of a failed or lost turn's calls was applied: the brief lists them. A
            # lost turn's channel was never closed (it was proven gone when recorded lost).
            unapplied = [call.describe() for call in channels.close_and_list(ended.turn_id)]
        return build_brief(
            turn_id=turn_id,
            spec=spec,
            contract=contract,
            session=session,
            goal=goal,
            now=self.sessions.now(),
            previous=previous,
            workspace=workspace_path(session.workspace),
            limits=self.limits,
            tools=TOOL_NAMES if channels is not None else (),
            unapplied_calls=unapplied,
        )

    def tool_server(
        self, session: SessionState, envelope: TurnEnvelope, brief: TurnBrief
    ) -> ToolServer | None:
        """Open the turn's tool channel (after its claim committed: the tools' dry runs
        fence with the claim's epoch) and name the server that reaches it."""
        channels = self.channels
        if channels is None:
            return None
        goals, goal_id = self.goals, session.goal_id
        goal, head = goals.load_at_head(goal_id)
        todo = goal.todos.get(envelope.todo_id) if envelope.todo_id else None
        turn = ChannelTurn(
            turn_id=envelope.turn_id,
            session_id=session.session_id,
            goal_id=session.goal_id,
            todo_id=envelope.todo_id,
            claim_owner=claim_owner(session.session_id),
            claim_epoch=todo.claim.epoch if todo is not None and todo.claim else None,
            workspace=workspace_path(session.workspace),
        )
        # The channel folds the goal's events since its snapshot of the goal, read only
        # when it has one to fold them onto.
        history = GoalHistory(head, lambda after: goals.event_texts(goal_id, after, head))
        return channels.open(turn, brief, goal, history)

    def with_tool_calls(self, envelope: TurnEnvelope, outcome: HostOutcome) -> HostOutcome:
        """The outcome with the tool calls of the turn's agent in its result. The channel
        is closed first (a later call is refused), so what is read is all there is. A
        failed host's calls are not applied: the next turn's brief lists them."""
        channels = self.channels
        if channels is None:
            return outcome
        calls = channels.close_and_list(envelope.turn_id)
        if not calls or not outcome.succeeded:
            return outcome
        merged = merge_calls(dict(outcome.result), calls, envelope.turn_id)
        return outcome.model_copy(update={"result": merged})

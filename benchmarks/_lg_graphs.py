"""LangGraph state schemas and graphs for the peer benchmarks (imported only when
LangGraph is installed: ``pip install -e '.[bench]'``).

Schemas live at module level so LangGraph can resolve their annotations.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Annotated, Any, TypedDict

from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph


class TurnState(TypedDict, total=False):
    """The latency peer's state: constant size, so only the per-node cost is measured."""

    turn: int
    note: str


Message = dict[str, str]


class ConversationState(TypedDict):
    """A conversation the usual way: the messages channel accumulates with a reducer."""

    messages: Annotated[list[Message], operator.add]


def extend_batches(state: list[Message], batches: Sequence[list[Message]]) -> list[Message]:
    """DeltaChannel's reducer: the state plus every batch of new messages, in order."""
    out = list(state)
    for batch in batches:
        out.extend(batch)
    return out


class DeltaConversationState(TypedDict):
    """The same conversation on LangGraph's DeltaChannel (beta): deltas plus a full
    snapshot of the channel every 100 updates."""

    messages: Annotated[list[Message], DeltaChannel(extend_batches)]


def turn_graph(checkpointer: Any) -> Any:
    """A one-node graph: each invocation is one "turn" that bumps a counter."""

    def node(state: TurnState) -> TurnState:
        return {"turn": state.get("turn", 0) + 1}

    builder = StateGraph(TurnState)
    builder.add_node("turn", node)
    builder.add_edge(START, "turn")
    builder.add_edge("turn", END)
    return builder.compile(checkpointer=checkpointer)


def conversation_graph(checkpointer: Any, reply: str, delta: bool = False) -> Any:
    """A one-node graph whose node answers each user message with ``reply``."""

    answer: Message = {"role": "assistant", "content": reply}

    # LangGraph reads a node's input schema off its annotation: one node per schema.
    def node(state: ConversationState) -> ConversationState:
        del state
        return {"messages": [answer]}

    def delta_node(state: DeltaConversationState) -> DeltaConversationState:
        del state
        return {"messages": [answer]}

    builder: Any = StateGraph(DeltaConversationState if delta else ConversationState)
    builder.add_node("turn", delta_node if delta else node)
    builder.add_edge(START, "turn")
    builder.add_edge("turn", END)
    return builder.compile(checkpointer=checkpointer)

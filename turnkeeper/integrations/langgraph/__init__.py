"""A LangGraph checkpointer on turnkeeper's event store (docs/langgraph.md).

``TurnkeeperSaver`` needs the ``langgraph`` extra; it is loaded on first use, so that
``verify`` can fold the saver's streams (:mod:`.log`) on an install without LangGraph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from turnkeeper.integrations.langgraph.log import THREAD_KIND, thread_stream_id

if TYPE_CHECKING:
    from turnkeeper.integrations.langgraph.saver import TurnkeeperSaver

__all__ = ["THREAD_KIND", "TurnkeeperSaver", "thread_stream_id"]


def __getattr__(name: str) -> type[TurnkeeperSaver]:
    if name == "TurnkeeperSaver":
        from turnkeeper.integrations.langgraph.saver import TurnkeeperSaver

        return TurnkeeperSaver
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

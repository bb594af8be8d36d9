"""Adapters that put other frameworks' state on turnkeeper's event store.

Each lives in its own package and needs its framework only when it is used (an
extra of pyproject.toml): ``langgraph`` is a LangGraph checkpointer (docs/langgraph.md).
"""

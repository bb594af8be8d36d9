"""A decide table: one rule per proposal (or command) class, each typed for its class.

Both kernels pick the rule for a value by its exact class (``table[type(value)]``).
A dict can only hold one value type, so each rule is registered through :func:`rule`,
which pairs it with its class and narrows the value to that class before the call:
the table is typed end to end, and a rule filed under the wrong class fails loudly
instead of being handed a value it does not expect.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

_State = TypeVar("_State")
_Value = TypeVar("_Value")
_Event = TypeVar("_Event")

# A rule as the table holds it: it takes any value and checks that it is its own kind.
TableRule = Callable[[_State, object, datetime], list[_Event]]


def rule(
    kind: type[_Value], decide: Callable[[_State, _Value, datetime], list[_Event]]
) -> tuple[type[object], TableRule[_State, _Event]]:
    """The table entry for ``decide``, the rule of ``kind``: ``(kind, checked rule)``."""

    def checked(state: _State, value: object, now: datetime) -> list[_Event]:
        if not isinstance(value, kind):  # pragma: no cover - the table looks up type(value)
            raise TypeError(f"the rule for {kind.__name__} was given {type(value).__name__}")
        return decide(state, value, now)

    return kind, checked

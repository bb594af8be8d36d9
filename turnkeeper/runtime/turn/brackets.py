"""A with-block that calls one function on entry and another on the way out.

Entered around every host (a lease kept, a run listed): a class with two calls, not a
``contextlib.contextmanager`` generator, which costs a turn a generator, its frame and
a wrapper of each block's own.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType


class Bracket:
    """``enter()`` when the block starts, ``leave()`` when it ends, however it ends."""

    __slots__ = ("_enter", "_leave")

    def __init__(self, enter: Callable[[], object], leave: Callable[[], object]) -> None:
        self._enter = enter
        self._leave = leave

    def __enter__(self) -> None:
        self._enter()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._leave()

"""Makes the modules named in ``TURNKEEPER_TEST_BLOCKED_MODULES`` (comma-separated top-level
names) unimportable in this process, as if their packages were not installed.

A child process gets it through a ``sitecustomize`` module that calls :func:`install`
(see test_without_extras.py), so every process the command starts in turn (the runner,
an agent's host) inherits the same blocked environment.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

VARIABLE = "TURNKEEPER_TEST_BLOCKED_MODULES"


class Blocker(MetaPathFinder):
    """First on ``sys.meta_path``: refuses a blocked module before any finder looks."""

    def __init__(self, blocked: frozenset[str]) -> None:
        self.blocked = blocked

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname.partition(".")[0] in self.blocked:
            # What the import system raises for a package that is not installed.
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def install() -> None:
    blocked = frozenset(name for name in os.environ.get(VARIABLE, "").split(",") if name)
    if blocked:
        sys.meta_path.insert(0, Blocker(blocked))

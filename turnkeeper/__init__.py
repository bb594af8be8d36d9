"""turnkeeper: a crash-proof control plane for long-running AI agents.

``from turnkeeper import Project`` is the Python API (docs/python.md). It is loaded
on first use, so that ``import turnkeeper`` — which the ``turnkeeper`` command does
before it parses its arguments — stays cheap: the store, the kernel and the runtime
are imported only by what needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from turnkeeper.project_api import Project, Status

__all__ = ["Project", "Status", "__version__"]

_LAZY = {"Project", "Status"}


def __getattr__(name: str) -> type[Project] | type[Status]:
    if name in _LAZY:
        import turnkeeper.project_api as api

        # Named one by one, not getattr(api, name): then the value has its type.
        return api.Project if name == "Project" else api.Status
    raise AttributeError(f"module 'turnkeeper' has no attribute {name!r}")

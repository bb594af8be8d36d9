"""The usage fixtures (a project made by ``turnkeeper init`` in a git repository)."""

from __future__ import annotations

from tests.usage.conftest import user_project

__all__ = ["user_project"]

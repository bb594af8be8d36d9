"""Fixtures for tests that use turnkeeper exactly as a user does (see project.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.usage.project import UserProject


@pytest.fixture
def user_project(tmp_path: Path) -> Iterator[UserProject]:
    project = UserProject(tmp_path / "work")
    try:
        yield project
    finally:
        project.close()

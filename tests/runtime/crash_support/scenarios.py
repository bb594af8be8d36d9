"""Running a test module's crash scenarios side by side, one project each."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

from tests.runtime.crash_support.project import ProjectFactory, project_factory

Outcome = TypeVar("Outcome")

# Scenarios are independent projects whose work runs in subprocesses (control planes,
# hosts, git): a few threads overlap the ~0.9 s interpreter start of each control plane
# and the backoff/timeout waits, which keeps the suite inside its time budget.
SCENARIO_WORKERS = 4


def selected_params(request: pytest.FixtureRequest, name: str) -> list[str]:
    """Values of the parametrized argument ``name`` in the selected tests of the
    requesting module, in collection order (so ``-k`` runs only what it selects)."""
    values: list[str] = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or getattr(item, "module", None) is not request.module:
            continue
        value = callspec.params.get(name)
        if value is not None and str(value) not in values:
            values.append(str(value))
    return values


@contextmanager
def scenario_pool(workers: int = SCENARIO_WORKERS) -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(workers, thread_name_prefix="crash-scenario") as pool:
        yield pool


@contextmanager
def run_side_by_side(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    param: str,
    scenario: Callable[[ProjectFactory, Path, str], Outcome],
    workers: int = SCENARIO_WORKERS,
) -> Iterator[dict[str, Future[Outcome]]]:
    """Start ``scenario(factory, root, value)`` for every selected value of the requesting
    module's parametrized argument ``param``, side by side, each under a temp dir of its
    own; yields the futures by value. On exit it waits for them all, then ends whatever
    the turns of their projects left running."""
    with project_factory() as factory, scenario_pool(workers) as pool:
        yield {
            value: pool.submit(scenario, factory, tmp_path_factory.mktemp(value), value)
            for value in selected_params(request, param)
        }

"""Running a test module's crash scenarios side by side, one project each."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

from tests.runtime.crash_support.databases import BACKENDS
from tests.runtime.crash_support.project import ProjectFactory, project_factory

Outcome = TypeVar("Outcome")
Scenario = Callable[[ProjectFactory, Path, str], Outcome]

# Scenarios are independent projects whose work runs in subprocesses (control planes,
# hosts, git): a few threads overlap the ~0.9 s interpreter start of each control plane
# and the backoff/timeout waits, which keeps the suite inside its time budget.
SCENARIO_WORKERS = 4


def selected_cases(request: pytest.FixtureRequest, *names: str) -> list[tuple[str, ...]]:
    """The values of the parametrized arguments ``names`` in the selected tests of the
    requesting module that take them all, in collection order (so ``-k`` runs only
    what it selects), each combination once."""
    cases: list[tuple[str, ...]] = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or getattr(item, "module", None) is not request.module:
            continue
        if not all(name in callspec.params for name in names):
            continue
        case = tuple(str(callspec.params[name]) for name in names)
        if case not in cases:
            cases.append(case)
    return cases


def selected_params(request: pytest.FixtureRequest, name: str) -> list[str]:
    """Values of the parametrized argument ``name`` in the selected tests of the
    requesting module, in collection order (so ``-k`` runs only what it selects)."""
    return [value for (value,) in selected_cases(request, name)]


@contextmanager
def scenario_pool(workers: int = SCENARIO_WORKERS) -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(workers, thread_name_prefix="crash-scenario") as pool:
        yield pool


@contextmanager
def run_side_by_side(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    param: str,
    scenario: Scenario[Outcome],
    workers: int = SCENARIO_WORKERS,
) -> Iterator[dict[str, Future[Outcome]]]:
    """Start ``scenario(factory, root, value)`` for every selected value of the requesting
    module's parametrized argument ``param``, side by side, each under a temp dir of its
    own, on SQLite; yields the futures by value. On exit it waits for them all, then
    ends whatever the turns of their projects left running."""
    with project_factory() as factory, scenario_pool(workers) as pool:
        yield {
            value: pool.submit(scenario, factory, tmp_path_factory.mktemp(value), value)
            for value in selected_params(request, param)
        }


@contextmanager
def run_side_by_side_on_backends(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    param: str,
    scenario: Scenario[Outcome],
    workers: int = SCENARIO_WORKERS,
) -> Iterator[dict[tuple[str, str], Future[Outcome]]]:
    """:func:`run_side_by_side` for a module whose tests are parametrized over
    ``backend`` (one of ``BACKENDS``) as well as ``param``: every selected (backend,
    value) runs, all in one pool, its project made by that backend's factory; yields
    the futures by (backend, value). On exit it waits for them all, ends whatever
    their turns left running and drops their databases."""
    with ExitStack() as stack:
        factories = {backend: stack.enter_context(project_factory(backend)) for backend in BACKENDS}
        pool = stack.enter_context(scenario_pool(workers))
        running: dict[tuple[str, str], Future[Outcome]] = {}
        for backend, value in selected_cases(request, "backend", param):
            root = tmp_path_factory.mktemp(f"{backend}-{value}")
            running[backend, value] = pool.submit(scenario, factories[backend], root, value)
        yield running

"""Running a test module's crash scenarios side by side, one project each."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

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

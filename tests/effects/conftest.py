from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.effects.service import CountingService


@pytest.fixture
def service(monkeypatch: pytest.MonkeyPatch) -> Iterator[CountingService]:
    # The service is local: no proxy from the environment may stand in between.
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with CountingService() as running:
        yield running

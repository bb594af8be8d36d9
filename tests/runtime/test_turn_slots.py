"""The run's turn slots (runtime/control/scheduler.py ``TurnSlots``): at most
``concurrency`` turns at once, at most ``budget`` in all, a waiter woken by the slot
given back, and nothing taken once the run is stopping."""

from __future__ import annotations

import threading
import time

import pytest

from turnkeeper.runtime.control import scheduler
from turnkeeper.runtime.control.scheduler import TurnSlots


def test_at_most_concurrency_at_once_and_budget_in_all() -> None:
    slots = TurnSlots(2, 3, threading.Event())
    assert slots.take() and slots.take()
    assert slots.started == 2 and not slots.spent()
    answers: list[bool] = []
    waiter = threading.Thread(target=lambda: answers.append(slots.take()))
    waiter.start()
    waiter.join(0.2)
    assert answers == []  # both slots busy
    slots.give_back()
    waiter.join(5)
    assert answers == [True]  # woken by the slot given back
    assert slots.started == 3 and slots.spent()
    slots.give_back()
    assert not slots.take()  # the budget is spent: nothing taken
    assert slots.started == 3
    slots.give_back()
    with pytest.raises(ValueError, match="not taken"):
        slots.give_back()


def test_without_a_budget_slots_are_reused_without_end() -> None:
    slots = TurnSlots(1, None, threading.Event())
    for _ in range(100):
        assert slots.take()
        slots.give_back()
    assert slots.started == 100 and not slots.spent()


def test_a_waiter_gives_up_when_the_run_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler, "_SLOT_WAIT_SECONDS", 0.05)
    stop = threading.Event()
    slots = TurnSlots(1, None, stop)
    assert slots.take()
    answers: list[bool] = []
    waiter = threading.Thread(target=lambda: answers.append(slots.take()))
    waiter.start()
    time.sleep(0.1)
    stop.set()
    waiter.join(5)
    assert answers == [False]
    slots.give_back()
    assert not slots.take()  # a free slot is not taken while stopping either
    assert slots.started == 1

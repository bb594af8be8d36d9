"""OpenTelemetry spans of each turn and its steps, made by whoever runs the turn.

The turn driver (runtime/turn/driver.py) calls :class:`TurnTracing` at the steps of
the turn transaction it already has, so ``turnkeeper run``, a worker and anything
embedding the Python API make the same spans as the turn runs:

- ``turnkeeper.turn``: the whole turn, from the moment the driver takes it up to its
  end, with ``turnkeeper.turn_id``, ``.session_id``, ``.turn_kind``, ``.attempt``,
  ``.outcome`` (``completed``, ``failed``, ``lost``; ``in_flight`` when the driver
  could not take the turn to its end — recovery does that later) and, for a failed
  turn, ``.error_kind``. Status ERROR unless the turn completed. ``turnkeeper.recovered``
  marks a turn a restarted control plane finished (reattached, written back from its
  receipt, or found lost).
- one child per step, named for the step it ends at and timed from the previous one:
  ``turnkeeper.turn.accepted``, ``.host_started``, ``.receipt``, ``.written_back``,
  then the end (``.completed`` or ``.failed``). A result that needs no outside work
  records receipt, write-back and completion in one commit: its ``written_back`` and
  ``completed`` children are then empty.

Spans go to the global tracer provider (set by the embedding program, or by
OpenTelemetry's own ``opentelemetry-instrument`` from ``OTEL_*`` variables). Whether
the OpenTelemetry API can be imported is decided once, when the tracing is made;
without it every call returns at once and nothing of OpenTelemetry is imported.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from turnkeeper import __version__
from turnkeeper.kernel.session import InFlightTurn

if TYPE_CHECKING:  # the API is optional: imported when the tracing is made, not before
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

TURN_SPAN: Final = "turnkeeper.turn"
# The steps after which a turn is over, as the driver records them.
_ENDS: Final = frozenset({"completed", "failed"})


def _tracer() -> Tracer | None:
    """The tracer of the global provider, or None without the OpenTelemetry API. A
    provider set later still receives the spans (the API's tracer delegates to it)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace.get_tracer("turnkeeper", __version__)


@dataclass
class _Live:
    """One turn being traced: its span, and when its last step ended."""

    root: Span
    context: Context
    turn_id: str
    step_began: int  # nanoseconds since the epoch
    outcome: str | None = None


class TurnTracing:
    """Spans of the turns one driver runs; a no-op without the OpenTelemetry API."""

    def __init__(self) -> None:
        self._tracer = _tracer()
        # The turns under way, by turn id: the driver runs several sessions' turns at
        # once, each on its own thread, and reports a step by turn id.
        self._live: dict[str, _Live] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    @contextmanager
    def turn(
        self, turn_id: str, session_id: str, kind: str, attempt: int, *, recovered: bool = False
    ) -> Iterator[None]:
        """The ``turnkeeper.turn`` span of ``turn_id`` around the block (the current span
        inside it, so what the turn calls may nest under it). A block that ends before
        the turn's end was reached leaves the span ``in_flight``, with the exception if
        one ended it. Within a block already tracing ``turn_id``: nothing more."""
        if self._tracer is None or turn_id in self._live:
            yield
            return
        from opentelemetry import trace

        live = self._start(turn_id, session_id, kind, attempt, recovered, time.time_ns())
        with self._lock:
            self._live[turn_id] = live
        try:
            with trace.use_span(
                live.root, end_on_exit=False, record_exception=False, set_status_on_exception=False
            ):
                yield
        except BaseException as error:
            if live.outcome is None:
                live.root.record_exception(error)
            raise
        finally:
            with self._lock:
                del self._live[turn_id]
            if live.outcome is None:
                self._end(live, "in_flight", time.time_ns())

    def reached(self, turn_id: str, step: str, *, error_kind: str | None = None) -> None:
        """Turn ``turn_id`` is through ``step``: its child span, from the previous step
        to now; ``completed`` or ``failed`` ends the turn's span too."""
        live = self._live.get(turn_id) if self._tracer is not None else None
        if live is None or live.outcome is not None:
            return
        now = time.time_ns()
        self._step(live, step, now)
        if step in _ENDS:
            if error_kind:
                live.root.set_attribute("turnkeeper.error_kind", error_kind)
            self._end(live, step, now)

    def ended_by_recovery(self, turn: InFlightTurn, session_id: str, *, outcome: str) -> None:
        """Turn ``turn`` whose end recovery recorded (``lost``): its span, from its
        acceptance as the log recorded it (in the process that died) to now, with one
        child for that end."""
        if self._tracer is None:
            return
        env = turn.envelope
        began = int(turn.accepted_at.timestamp() * 1_000_000_000)
        live = self._start(env.turn_id, session_id, str(env.kind), env.attempt, True, began)
        now = time.time_ns()
        self._step(live, outcome, now)
        self._end(live, outcome, now)

    def _start(
        self, turn_id: str, session_id: str, kind: str, attempt: int, recovered: bool, began: int
    ) -> _Live:
        from opentelemetry import trace

        assert self._tracer is not None
        attributes: dict[str, str | int | bool] = {
            "turnkeeper.turn_id": turn_id,
            "turnkeeper.session_id": session_id,
            "turnkeeper.turn_kind": kind,
            "turnkeeper.attempt": attempt,
        }
        if recovered:
            attributes["turnkeeper.recovered"] = True
        root = self._tracer.start_span(TURN_SPAN, start_time=began, attributes=attributes)
        return _Live(root, trace.set_span_in_context(root), turn_id, began)

    def _step(self, live: _Live, step: str, now: int) -> None:
        assert self._tracer is not None
        child = self._tracer.start_span(
            f"{TURN_SPAN}.{step}",
            context=live.context,
            start_time=live.step_began,
            attributes={"turnkeeper.turn_id": live.turn_id, "turnkeeper.phase": step},
        )
        child.end(end_time=now)
        live.step_began = now

    def _end(self, live: _Live, outcome: str, now: int) -> None:
        from opentelemetry.trace import Status, StatusCode

        live.outcome = outcome
        live.root.set_attribute("turnkeeper.outcome", outcome)
        if outcome != "completed":
            live.root.set_status(Status(StatusCode.ERROR, outcome))
        live.root.end(end_time=now)

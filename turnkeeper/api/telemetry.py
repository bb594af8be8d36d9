"""OpenTelemetry spans per turn and per phase, when the SDK is installed (``[otel]``).

A span is made for every turn the server sees end (``TurnObserver``), with the
times the log recorded: a ``turnkeeper.turn`` span from acceptance to the end, and
one child span per step of the turn transaction (``turnkeeper.turn.host_started``
from acceptance to the host's start, and so on). Every span carries the turn id as
``turnkeeper.turn_id``. The spans go to the tracer provider given, else the global
one (set up by whoever embeds or launches the server); without the OpenTelemetry
API installed there are no spans and nothing is imported.
"""

from __future__ import annotations

import importlib.util
import itertools
from datetime import datetime
from typing import TYPE_CHECKING

from turnkeeper.api.observer import EndedTurn

if TYPE_CHECKING:  # the SDK is optional: imported when spans are made, not before
    from opentelemetry.trace import TracerProvider

_ORDER = ("accepted", "host_started", "receipt", "written_back")


def available() -> bool:
    return importlib.util.find_spec("opentelemetry") is not None


def _nanos(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000_000)


class TurnSpans:
    """Turns to spans on ``tracer_provider`` (default: the global provider)."""

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        from opentelemetry import trace

        self._trace = trace
        provider = tracer_provider or trace.get_tracer_provider()
        self._tracer = provider.get_tracer("turnkeeper")

    def __call__(self, turn: EndedTurn) -> None:
        attributes: dict[str, str | int] = {
            "turnkeeper.turn_id": turn.turn_id,
            "turnkeeper.session_id": turn.session_id,
            "turnkeeper.turn_kind": turn.kind,
            "turnkeeper.attempt": turn.attempt,
            "turnkeeper.outcome": turn.outcome,
        }
        if turn.error_kind:
            attributes["turnkeeper.error_kind"] = turn.error_kind
        end = turn.phases[turn.outcome]
        root = self._tracer.start_span(
            "turnkeeper.turn", start_time=_nanos(turn.phases["accepted"]), attributes=attributes
        )
        if turn.outcome != "completed":
            root.set_status(self._trace.Status(self._trace.StatusCode.ERROR, turn.outcome))
        context = self._trace.set_span_in_context(root)
        steps = [(name, turn.phases[name]) for name in _ORDER if name in turn.phases]
        steps.append((turn.outcome, end))
        for (_, began), (name, ended) in itertools.pairwise(steps):
            child = self._tracer.start_span(
                f"turnkeeper.turn.{name}",
                context=context,
                start_time=_nanos(began),
                attributes={"turnkeeper.turn_id": turn.turn_id, "turnkeeper.phase": name},
            )
            child.end(end_time=_nanos(ended))
        root.end(end_time=_nanos(end))

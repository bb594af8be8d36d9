"""``/metrics``: the operator signals in Prometheus' text format, computed at scrape time.

Each scrape refreshes the :class:`~turnkeeper.api.observer.TurnObserver` (it reads only
what the log gained since the last one) and reports its figures. They are read back
from the store, so they count every controller's turns — one ``run`` here, several
workers elsewhere — not only what this process saw.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from turnkeeper.api.observer import DURATION_BUCKETS, TurnObserver

SESSION_STATUSES = ("ready", "running", "suspended", "crashed", "closed", "deleted")


class StoreCollector(Collector):
    def __init__(self, observer: TurnObserver) -> None:
        self._observer = observer

    def collect(self) -> Iterator[Metric]:
        figures = self._observer.refresh()
        turns = CounterMetricFamily(
            "turnkeeper_turns", "Turns that ended, by kind and outcome.", labels=["kind", "outcome"]
        )
        for (kind, outcome), count in sorted(figures.turns.items()):
            turns.add_metric([kind, outcome], count)
        yield turns
        latency = HistogramMetricFamily(
            "turnkeeper_turn_duration_seconds",
            "Time from a turn's acceptance to its end, by kind.",
            labels=["kind"],
        )
        for kind, counts in sorted(figures.duration_buckets.items()):
            buckets = [
                (str(float(b)), float(c)) for b, c in zip(DURATION_BUCKETS, counts, strict=True)
            ]
            buckets.append(("+Inf", float(figures.duration_count[kind])))
            latency.add_metric([kind], buckets, figures.duration_sum[kind])
        yield latency
        recoveries = CounterMetricFamily(
            "turnkeeper_recovery_actions",
            "Actions restart recovery took, by action.",
            labels=["action"],
        )
        for action, count in sorted(figures.recoveries.items()):
            recoveries.add_metric([action], count)
        yield recoveries
        yield CounterMetricFamily(
            "turnkeeper_lease_takeovers",
            "Session leases acquired from another owner that had not released them.",
            value=figures.lease_takeovers,
        )
        effects = CounterMetricFamily(
            "turnkeeper_effects", "External effects resolved, by outcome.", labels=["outcome"]
        )
        for outcome, count in sorted(figures.effects.items()):
            effects.add_metric([outcome], count)
        yield effects
        sessions = GaugeMetricFamily(
            "turnkeeper_sessions", "Sessions now, by status.", labels=["status"]
        )
        for status in SESSION_STATUSES:
            sessions.add_metric([status], figures.sessions.get(status, 0))
        yield sessions


def metrics_registry(observer: TurnObserver) -> CollectorRegistry:
    """A registry of this app's own (never the process-global one: two apps in one
    process, as in the tests, must not share figures)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(observer))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)

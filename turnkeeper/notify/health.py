"""What ``status`` (and the API's status) says of notifications: failing endpoints."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from turnkeeper.notify import outbox
from turnkeeper.notify.urls import shown_url
from turnkeeper.store.base import EventStore


class FailingEndpoint(BaseModel):
    endpoint_id: str
    url: str  # without a password or query (endpoints.shown_url)
    failures: int  # attempts in a row that failed
    since: datetime
    last_error: str
    next_attempt_at: datetime

    def describe(self) -> str:
        """One line for a person."""
        return (
            f"notify endpoint {self.endpoint_id} ({self.url}) failing: {self.failures} "
            f"attempt{'s' if self.failures != 1 else ''} in a row since "
            f"{self.since:%Y-%m-%d %H:%M:%S}, last error: {self.last_error}; "
            f"next attempt at {self.next_attempt_at:%H:%M:%S}"
        )


class NotificationStatus(BaseModel):
    endpoints: int = 0
    failing: list[FailingEndpoint] = []
    gave_up: int = 0  # notifications dropped after every attempt failed, in all


def notification_status(store: EventStore) -> NotificationStatus:
    state, _ = outbox.load(store)
    failing = [
        FailingEndpoint(
            endpoint_id=e.endpoint_id,
            url=shown_url(e.url),
            failures=e.failing.failures,
            since=e.failing.since,
            last_error=e.failing.last_error,
            next_attempt_at=e.failing.next_attempt_at,
        )
        for e in sorted(state.endpoints.values(), key=lambda e: e.endpoint_id)
        if e.failing is not None
    ]
    return NotificationStatus(
        endpoints=len(state.endpoints),
        failing=failing,
        gave_up=sum(e.gave_up for e in state.endpoints.values()),
    )

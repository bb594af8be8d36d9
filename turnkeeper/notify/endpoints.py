"""What ``turnkeeper notify`` does: add, list, remove and test endpoints."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from pydantic import SecretStr

from turnkeeper.errors import InvalidArgument, NotFound
from turnkeeper.json_types import JsonDict
from turnkeeper.notify import outbox
from turnkeeper.notify.derive import GOAL_KIND, NOTIFICATION_SCHEMA, SESSION_KIND
from turnkeeper.notify.post import Outcome, post
from turnkeeper.notify.records import (
    EVENT_NAMES,
    EndpointAdded,
    EndpointRemoved,
    EventName,
    NotifyState,
)
from turnkeeper.notify.signing import headers, new_secret
from turnkeeper.notify.urls import check_url, shown_url
from turnkeeper.store.base import EventStore

MAX_ENDPOINTS: Final = 50
MIN_SECRET_CHARS: Final = 16


def parse_events(text: str | None) -> tuple[EventName, ...]:
    """``--events a,b``: every event name known, or all of them when not given."""
    if not text:
        return EVENT_NAMES
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in EVENT_NAMES]
    if unknown or not names:
        raise InvalidArgument(
            f"unknown event {', '.join(unknown) or '(none)'}: choose from {', '.join(EVENT_NAMES)}",
            reason="unknown_notify_event",
            details={"events": unknown, "known": list(EVENT_NAMES)},
        )
    return tuple(n for n in EVENT_NAMES if n in names)


def check_secret(secret: str) -> SecretStr:
    secret = secret.strip()
    if len(secret) < MIN_SECRET_CHARS:
        raise InvalidArgument(
            f"the secret must be at least {MIN_SECRET_CHARS} characters",
            reason="weak_notify_secret",
        )
    return SecretStr(secret)


@dataclass(frozen=True)
class Added:
    endpoint_id: str
    secret: SecretStr
    generated: bool


def add_endpoint(
    store: EventStore,
    url: str,
    events: Sequence[EventName],
    secret: SecretStr | None = None,
    by: str = "",
) -> Added:
    check_url(url)
    generated = secret is None
    chosen = secret or new_secret()
    endpoint_id = f"ep-{secrets.token_hex(4)}"
    # Told of what happens from now on: each stream's head now is where it starts.
    listed = store.list_projections_of((GOAL_KIND, SESSION_KIND))
    start = {p.stream_id: p.stream_head for kind in (GOAL_KIND, SESSION_KIND) for p in listed[kind]}

    def decide(state: NotifyState) -> EndpointAdded:
        if len(state.endpoints) >= MAX_ENDPOINTS:
            raise InvalidArgument(
                f"a project has at most {MAX_ENDPOINTS} endpoints", reason="too_many_endpoints"
            )
        return EndpointAdded(
            endpoint_id=endpoint_id,
            url=url,
            events=tuple(events),
            secret=chosen,
            by=by,
            start=start,
            at=store.now(),
        )

    outbox.append(store, decide)
    return Added(endpoint_id, chosen, generated)


def resolve_endpoint(state: NotifyState, text: str) -> str:
    if text in state.endpoints:
        return text
    matches = [e for e in state.endpoints if e.startswith(text)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NotFound(
            f"endpoint {text!r} not found", reason="endpoint_not_found", details={"id": text}
        )
    raise InvalidArgument(
        f"endpoint id {text!r} is ambiguous: {', '.join(sorted(matches))}", reason="ambiguous_id"
    )


def remove_endpoint(store: EventStore, text: str, by: str = "") -> str:
    removed: list[str] = []

    def decide(state: NotifyState) -> EndpointRemoved:
        endpoint_id = resolve_endpoint(state, text)
        removed[:] = [endpoint_id]
        return EndpointRemoved(endpoint_id=endpoint_id, by=by, at=store.now())

    outbox.append(store, decide)
    return removed[0]


def endpoint_rows(state: NotifyState) -> list[JsonDict]:
    """Every endpoint as ``notify list`` and ``status`` show it: never its secret."""
    rows: list[JsonDict] = []
    for e in sorted(state.endpoints.values(), key=lambda e: e.endpoint_id):
        failing: JsonDict | None = None
        if e.failing is not None:
            failing = {
                "failures": e.failing.failures,
                "since": e.failing.since.isoformat(),
                "last_error": e.failing.last_error,
                "next_attempt_at": e.failing.next_attempt_at.isoformat(),
                "key": e.failing.key,
                "source": {"stream": e.failing.stream_id, "seq": e.failing.seq},
            }
        rows.append(
            {
                "endpoint_id": e.endpoint_id,
                "url": shown_url(e.url),
                "events": list(e.events),
                "added_at": e.added_at.isoformat(),
                "delivered": e.delivered,
                "last_delivered_at": e.last_delivered_at.isoformat()
                if e.last_delivered_at
                else None,
                "gave_up": e.gave_up,
                "last_gave_up_error": e.last_gave_up,
                "failing": failing,
            }
        )
    return rows


def test_endpoint(store: EventStore, text: str) -> tuple[str, Outcome]:
    """POST a signed ``test`` notification now (nothing is recorded)."""
    state, _ = outbox.load(store)
    endpoint = state.endpoints[resolve_endpoint(state, text)]
    key = f"tkn-test-{secrets.token_hex(8)}"
    body = json.dumps(
        {
            "schema": NOTIFICATION_SCHEMA,
            "id": key,
            "event": "test",
            "occurred_at": store.now().isoformat(),
            "summary": "a test notification from `turnkeeper notify test`",
            "goal_id": None,
            "session_id": None,
            "details": {},
            "source": None,
        },
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    sent = headers(
        secret=endpoint.secret,
        key=key,
        event="test",
        attempt=1,
        timestamp=int(time.time()),
        body=body,
    )
    return endpoint.endpoint_id, post(endpoint.url, body, sent)

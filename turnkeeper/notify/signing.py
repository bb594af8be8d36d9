"""The idempotency key, the signature and the headers of a notification.

* **Key** — derived from the endpoint, the source stream and the event's sequence
  number, so every attempt of one notification to one endpoint, in any process and
  after any restart, carries the same key: a receiver that keeps the keys it took
  drops the repeats of an at-least-once delivery.
* **Signature** — ``X-Turnkeeper-Signature: sha256=<hex>``, the HMAC-SHA256 with the
  endpoint's secret of ``<timestamp>.<body>``, where ``<timestamp>`` is the
  ``X-Turnkeeper-Timestamp`` header (Unix seconds). Signing the timestamp with the
  body lets a receiver refuse an old request replayed (docs/notifications.md).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Final

from pydantic import SecretStr

SIGNATURE_HEADER: Final = "X-Turnkeeper-Signature"
TIMESTAMP_HEADER: Final = "X-Turnkeeper-Timestamp"
KEY_HEADER: Final = "Idempotency-Key"
EVENT_HEADER: Final = "X-Turnkeeper-Event"
ATTEMPT_HEADER: Final = "X-Turnkeeper-Attempt"
SECRET_BYTES: Final = 32


def new_secret() -> SecretStr:
    return SecretStr(secrets.token_urlsafe(SECRET_BYTES))


def idempotency_key(endpoint_id: str, stream_id: str, seq: int) -> str:
    digest = hashlib.sha256(f"{endpoint_id}\n{stream_id}\n{seq}".encode()).hexdigest()
    return f"tkn-{digest[:40]}"


def signature(secret: SecretStr, timestamp: int, body: bytes) -> str:
    """The header's value: ``sha256=`` and the hex HMAC of ``<timestamp>.<body>``."""
    mac = hmac.new(secret.get_secret_value().encode(), f"{timestamp}.".encode() + body, "sha256")
    return f"sha256={mac.hexdigest()}"


def verify(secret: SecretStr, timestamp: str, body: bytes, header: str) -> bool:
    """What a receiver checks (its constant-time comparison); for tests and the docs."""
    try:
        stamp = int(timestamp)
    except ValueError:
        return False
    return hmac.compare_digest(signature(secret, stamp, body), header)


def headers(
    *, secret: SecretStr, key: str, event: str, attempt: int, timestamp: int, body: bytes
) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": "turnkeeper-notify/1",
        KEY_HEADER: key,
        EVENT_HEADER: event,
        ATTEMPT_HEADER: str(attempt),
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: signature(secret, timestamp, body),
    }

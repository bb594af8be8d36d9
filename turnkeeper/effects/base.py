"""The effect provider protocol: apply under an idempotency key, and read back.

A provider talks to one external system: it returns an effect result or a
readback, and decides nothing (docs/design.md, "Who decides"). The runtime calls
it only for effects the kernel accepted an intent for, and always reads back
before any apply::

    readback(key, request) -> applied | not_applied | unknown
    apply(key, request)    -> ApplyResult   (only after a provable not_applied)
    readback(key, request) -> the outcome that is recorded

``applied`` carries the observed value; ``not_applied`` must mean *provably absent*
(the runtime then applies, so a provider that cannot be sure answers ``unknown``);
``unknown`` — returned or raised as any exception — makes the effect
``indeterminate``: it is never retried automatically, and an operator decides.

A provider may also define ``validate_request(request) -> None`` raising
:class:`~turnkeeper.errors.InvalidArgument`: a request it refuses is rejected before
any intent is recorded, so nothing is ever attempted with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pydantic import JsonValue

from turnkeeper.vocabulary import ReadbackStatus

Request = Mapping[str, JsonValue]


@dataclass(frozen=True)
class Readback:
    status: ReadbackStatus
    value: JsonValue = None
    detail: str = ""

    @classmethod
    def applied(cls, value: JsonValue = None, detail: str = "") -> Readback:
        return cls("applied", value, detail)

    @classmethod
    def not_applied(cls, detail: str = "") -> Readback:
        return cls("not_applied", None, detail)

    @classmethod
    def unknown(cls, detail: str = "") -> Readback:
        return cls("unknown", None, detail)


@dataclass(frozen=True)
class ApplyResult:
    """What the apply call said. Informational only: the outcome is the readback's."""

    accepted: bool
    value: JsonValue = None
    detail: str = ""


@runtime_checkable
class EffectProvider(Protocol):
    def apply(self, key: str, request: Request) -> ApplyResult: ...

    def readback(self, key: str, request: Request) -> Readback: ...

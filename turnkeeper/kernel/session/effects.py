"""The effects a turn's result requests, read purely from its durable receipt.

A result may ask for external effects (step 6 of the turn transaction)::

    {"effects": [{"provider": "http", "request": {"body": {"n": 1}}}, ...]}

Each entry gets a stable identity from the turn and its position: effect id ``e<n>``
and idempotency key ``<turn key>-e<n>``, where the turn key is the envelope's (derived
from session, turn and attempt). A restart reads the same receipt and so derives the
same ids and keys: a provider can dedupe on the key, and the kernel checks every
intent against this plan, so nothing is run that the agent did not ask for.

Entries that cannot run are planned as rejected (with a reason) instead of failing the
turn; a list longer than :data:`MAX_EFFECTS_PER_TURN` rejects every entry, because
running a prefix and silently dropping the rest would be worse.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pydantic import Field, JsonValue

from turnkeeper.kernel.session._model import Id, JsonDict, KernelModel, ShortText

MAX_EFFECTS_PER_TURN = 16
_PROVIDER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_ENTRY_KEYS = frozenset({"provider", "request"})


def effect_id(index: int) -> str:
    return f"e{index}"


def derive_effect_key(turn_key: str, index: int) -> str:
    """The idempotency key of the ``index``-th effect of the turn whose key is ``turn_key``."""
    if index < 0:
        raise ValueError("an effect index is not negative")
    return f"{turn_key}-{effect_id(index)}"


class PlannedEffect(KernelModel):
    """One requested effect: runnable (``rejection is None``) or refused with a reason."""

    effect_id: Id
    index: int = Field(ge=0, lt=MAX_EFFECTS_PER_TURN)
    idempotency_key: Id
    provider: ShortText
    request: JsonDict = Field(default_factory=dict)
    rejection: Id | None = None
    detail: ShortText = ""


def _planned(
    turn_key: str,
    index: int,
    provider: str,
    request: JsonDict | None = None,
    rejection: str | None = None,
    detail: str = "",
) -> PlannedEffect:
    return PlannedEffect(
        effect_id=effect_id(index),
        index=index,
        idempotency_key=derive_effect_key(turn_key, index),
        provider=provider[:200],
        request=request or {},
        rejection=rejection,
        detail=detail[:2000],
    )


def _entry(turn_key: str, index: int, raw: JsonValue) -> PlannedEffect:
    if not isinstance(raw, dict):
        return _planned(turn_key, index, "", None, "malformed_effect", "an effect is an object")
    provider = raw.get("provider")
    name = provider if isinstance(provider, str) else ""
    extra = sorted(set(raw) - _ENTRY_KEYS)
    if extra:
        detail = f"unknown fields: {', '.join(extra)}"
        return _planned(turn_key, index, name, None, "malformed_effect", detail)
    if not isinstance(provider, str) or not _PROVIDER_NAME.match(provider):
        detail = "provider must be a name of letters, digits, '_', '.' or '-'"
        return _planned(turn_key, index, name, None, "malformed_effect", detail)
    request = raw.get("request", {})
    if not isinstance(request, dict):
        return _planned(turn_key, index, name, None, "malformed_effect", "request is an object")
    return _planned(turn_key, index, provider, request)


def plan_effects(result: Mapping[str, JsonValue], turn_key: str) -> tuple[PlannedEffect, ...]:
    """The effects ``result`` requests, in order; at most :data:`MAX_EFFECTS_PER_TURN`."""
    raw = result.get("effects")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        return (_planned(turn_key, 0, "", None, "malformed_effects", "effects must be a list"),)
    if len(raw) > MAX_EFFECTS_PER_TURN:
        detail = f"the result requests {len(raw)} effects; at most {MAX_EFFECTS_PER_TURN} a turn"
        return tuple(
            _planned(turn_key, n, "", None, "too_many_effects", detail)
            for n in range(MAX_EFFECTS_PER_TURN)
        )
    return tuple(_entry(turn_key, n, item) for n, item in enumerate(raw))

"""Per-session effects configuration: the ``"effects"`` section of the host config.

A session enables providers by name; only an enabled provider runs (installing a
provider package grants it nothing). The section is turnkeeper's own: the driver
removes it before the host sees its config::

    {
      "script": {...},                       # the host's own settings
      "effects": {
        "providers": {
          "http": {"url": "https://api.example.com/orders",
                   "readback_url": "https://api.example.com/orders/by-key/{key}",
                   "header_env": {"Authorization": "ORDERS_TOKEN"}},
          "notify": {"kind": "command",
                     "apply": "notify-send --id {key}",
                     "readback": "notify-check {key}"}
        }
      }
    }

A turn's result names the provider (``{"provider": "http", ...}``); ``kind`` (the
entry point of group ``turnkeeper.effects``) defaults to that name, and the other
fields are the provider's own config.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator

from turnkeeper.errors import InvalidArgument

EFFECTS_CONFIG_KEY = "effects"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
V = TypeVar("V")


class ProviderSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: str
    config: dict[str, JsonValue] = Field(default_factory=dict)


class EffectsConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    providers: dict[str, dict[str, JsonValue]] = Field(default_factory=dict)

    @field_validator("providers")
    @classmethod
    def _names(cls, value: dict[str, dict[str, JsonValue]]) -> dict[str, dict[str, JsonValue]]:
        for name, spec in value.items():
            if not _NAME.match(name):
                raise ValueError(f"provider name {name!r} is not a simple name")
            kind = spec.get("kind", name)
            if not isinstance(kind, str) or not _NAME.match(kind):
                raise ValueError(f"provider {name!r}: kind must be a simple name")
        return value

    def spec(self, name: str) -> ProviderSpec | None:
        raw = self.providers.get(name)
        if raw is None:
            return None
        kind = raw.get("kind", name)
        assert isinstance(kind, str)  # checked by the validator
        return ProviderSpec(kind=kind, config={k: v for k, v in raw.items() if k != "kind"})


def split_host_config(host_config: Mapping[str, V]) -> dict[str, V]:
    """The host's part of a session's host config: everything but ``"effects"``."""
    return {k: v for k, v in host_config.items() if k != EFFECTS_CONFIG_KEY}


def effects_config(host_config: Mapping[str, object]) -> EffectsConfig:
    """The session's effects section; ``InvalidArgument`` when it is malformed."""
    raw = host_config.get(EFFECTS_CONFIG_KEY, {})
    try:
        return EffectsConfig.model_validate(raw)
    except ValidationError as exc:
        raise InvalidArgument(
            f"the session's effects config is malformed ({exc.error_count()} errors)",
            reason="invalid_effects_config",
            details={"errors": exc.errors(include_url=False, include_context=False)},
        ) from exc

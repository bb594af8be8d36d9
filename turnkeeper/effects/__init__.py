"""External effects: providers that apply a turn's requested effects under an
idempotency key and read them back (step 6 of the turn transaction).

:mod:`.base` is the provider protocol, :mod:`.registry` finds providers through the
``turnkeeper.effects`` entry-point group, :mod:`.config` reads a session's
``effects`` config, and :mod:`.http_provider` / :mod:`.command_provider` are the built-ins. The
runtime that drives them is :mod:`turnkeeper.runtime.turn.effects`.
"""

from turnkeeper.effects.base import ApplyResult, EffectProvider, Readback
from turnkeeper.effects.config import (
    EFFECTS_CONFIG_KEY,
    EffectsConfig,
    ProviderSpec,
    effects_config,
    split_host_config,
)
from turnkeeper.effects.registry import (
    ENTRY_POINT_GROUP,
    ProviderLoader,
    available_provider_kinds,
    load_provider,
)
from turnkeeper.vocabulary import ReadbackStatus  # a provider returns one of these

__all__ = [
    "EFFECTS_CONFIG_KEY",
    "ENTRY_POINT_GROUP",
    "ApplyResult",
    "EffectProvider",
    "EffectsConfig",
    "ProviderLoader",
    "ProviderSpec",
    "Readback",
    "ReadbackStatus",
    "available_provider_kinds",
    "effects_config",
    "load_provider",
    "split_host_config",
]

"""Effect provider discovery through the ``turnkeeper.effects`` entry-point group.

A third party adds a provider by declaring, in its own package::

    [project.entry-points."turnkeeper.effects"]
    tickets = "mypkg.effects:TicketProvider"

where ``TicketProvider(config: dict) -> EffectProvider``. Installing it grants no
authority: a session must enable it in its ``effects`` config (see :mod:`.config`).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points

from turnkeeper.effects.base import EffectProvider
from turnkeeper.errors import InvalidArgument, NotFound
from turnkeeper.json_types import JsonDict

ENTRY_POINT_GROUP = "turnkeeper.effects"

# Used only when the distribution's entry points are not installed (a source
# checkout run without ``pip install -e .``); an installed entry point always wins.
BUILTINS = {
    "http": "turnkeeper.effects.http_provider:HttpProvider",
    "command": "turnkeeper.effects.command_provider:CommandProvider",
}

ProviderLoader = Callable[[str, JsonDict], EffectProvider]
# What an entry point names: called with the provider's config, it should make a
# provider; what it made is checked (``object`` until then: a plugin may get it wrong).
ProviderFactory = Callable[[dict[str, object]], object]


def _factories() -> dict[str, Callable[[], ProviderFactory]]:
    found: dict[str, Callable[[], ProviderFactory]] = {
        name: functools.partial(_load_path, target) for name, target in BUILTINS.items()
    }
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found[ep.name] = ep.load
    return found


def _load_path(target: str) -> ProviderFactory:
    module, _, attr = target.partition(":")
    factory: ProviderFactory = getattr(importlib.import_module(module), attr)
    return factory


def available_provider_kinds() -> list[str]:
    return sorted(_factories())


def load_provider(kind: str, config: Mapping[str, object] | None = None) -> EffectProvider:
    """Instantiate the provider registered as ``kind`` with ``config``.

    ``NotFound`` (listing the known kinds) for an unknown kind; ``InvalidArgument``
    if the config is rejected or the entry point does not produce a provider.
    """
    factories = _factories()
    if kind not in factories:
        known = sorted(factories)
        raise NotFound(
            f"unknown effect provider {kind!r}; known: {', '.join(known)}",
            reason="unknown_effect_provider",
            details={"kind": kind, "known": known},
        )
    provider = factories[kind]()(dict(config or {}))
    if not isinstance(provider, EffectProvider):
        raise InvalidArgument(
            f"effect provider {kind!r} produced {type(provider).__name__}, not a provider",
            reason="invalid_effect_provider",
        )
    return provider

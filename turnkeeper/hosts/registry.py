"""Host discovery through the ``turnkeeper.hosts`` entry-point group.

A third party adds a host by declaring, in its own package::

    [project.entry-points."turnkeeper.hosts"]
    mykind = "mypkg.hosts:MyHost"

where ``MyHost(config: dict) -> Host``. Installing a host gives it no authority:
it only runs turns the driver hands it.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import TypeGuard

from turnkeeper.errors import InvalidArgument, NotFound
from turnkeeper.hosts.base import Host
from turnkeeper.json_types import JsonDict, JsonMapping
from turnkeeper.memo import Memo

ENTRY_POINT_GROUP = "turnkeeper.hosts"

# What an entry point names: called with the host config, it should make a Host
# (``load_host`` checks that it did, so it is typed as making any object).
HostFactory = Callable[[JsonDict], object]

# Used only when the distribution's entry points are not installed (a source
# checkout run without ``pip install -e .``); an installed entry point always wins.
BUILTINS = {
    "subprocess": "turnkeeper.hosts.subprocess_host:SubprocessHost",
    "python": "turnkeeper.hosts.python_host:PythonHost",
    "scripted": "turnkeeper.hosts.scripted:ScriptedHost",
    "codex": "turnkeeper.hosts.codex:CodexHost",
    "claude": "turnkeeper.hosts.claude:ClaudeHost",
}


# Cached for the process; cleared by reload_host_kinds() (a plugin installed in-process):
# what is installed does not change under a running process otherwise.
@functools.cache
def _factories() -> dict[str, Callable[[], HostFactory]]:
    """Host kinds to their factories, read from the installed entry points once per
    process: reading package metadata costs ~1.6 ms, far more than the rest of a turn's
    host set-up, and what is installed does not change under a running process."""
    found: dict[str, Callable[[], HostFactory]] = {
        name: functools.partial(_load_path, target) for name, target in BUILTINS.items()
    }
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found[ep.name] = ep.load
    return found


# Cached for the process; cleared by reload_host_kinds(), with the factories.
@functools.cache
def _loaded(kind: str) -> HostFactory:
    """The host class of ``kind``, imported once."""
    return _factories()[kind]()


def _load_path(target: str) -> HostFactory:
    module, _, attr = target.partition(":")
    factory: HostFactory = getattr(importlib.import_module(module), attr)
    return factory


# Owned by :func:`_is_host`, made at import, one per process; anyone may clear it.
# Classes whose instances were found to be Hosts. ``isinstance`` against a runtime
# Protocol walks the protocol's members twice on this Python (~95k instructions, once
# or twice a turn); the members a class answers do not change between its instances,
# so one check per class is enough. Invalid when a plugin is reloaded (it brings new
# classes): ``reload_host_kinds()`` clears it with the factories.
_host_types: Memo[type, bool] = Memo(
    "classes found to be Hosts",
    max_entries=64,
    invalidation="when the host kinds are read again (reload_host_kinds clears it)",
)


def _is_host(host: object) -> TypeGuard[Host]:
    cls = type(host)
    if cls in _host_types:
        return True
    if not isinstance(host, Host):
        return False
    _host_types.put(cls, True)
    return True


def reload_host_kinds() -> None:
    """Read the installed host kinds again (after installing a plugin in-process)."""
    _factories.cache_clear()
    _loaded.cache_clear()
    _host_types.clear()


def available_host_kinds() -> list[str]:
    return sorted(_factories())


#: What loads a session's host: :func:`load_host`, or a test's or the runner's stand-in.
HostLoader = Callable[[str, JsonDict], Host]


def load_host(kind: str, config: JsonMapping | None = None) -> Host:
    """Instantiate the host registered as ``kind`` with ``config``.

    ``NotFound`` (listing the known kinds) for an unknown kind; ``InvalidArgument``
    if the config is rejected or the entry point does not produce a ``Host``.
    """
    factories = _factories()
    if kind not in factories:
        known = sorted(factories)
        raise NotFound(
            f"unknown host kind {kind!r}; known kinds: {', '.join(known)}",
            reason="unknown_host_kind",
            details={"kind": kind, "known": known},
        )
    factory = _loaded(kind)
    host = factory(dict(config or {}))
    if not _is_host(host):
        raise InvalidArgument(
            f"host kind {kind!r} produced {type(host).__name__}, which is not a Host",
            reason="invalid_host",
        )
    return host

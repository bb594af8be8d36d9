"""Every host kind and effect provider installed, with who provides it and whether it loads.

Hosts come from the ``turnkeeper.hosts`` entry-point group and effect providers from
``turnkeeper.effects`` (see :mod:`turnkeeper.hosts.registry` and
:mod:`turnkeeper.effects.registry`). Each entry point is loaded here, one at a time:
a plugin whose module fails to import is listed with the error's one-line message,
so one broken package never hides the others.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

from pydantic import BaseModel, ConfigDict

from turnkeeper import __version__
from turnkeeper.effects import registry as effects_registry
from turnkeeper.extensions.findings import Group
from turnkeeper.hosts import registry as hosts_registry

# (group, entry-point group, the registry's fallbacks for a checkout without metadata)
_GROUPS: tuple[tuple[Group, str, dict[str, str]], ...] = (
    ("host", hosts_registry.ENTRY_POINT_GROUP, hosts_registry.BUILTINS),
    ("effect", effects_registry.ENTRY_POINT_GROUP, effects_registry.BUILTINS),
)
_MAX_ERROR_CHARS = 300


class Extension(BaseModel):
    """One host kind or effect provider as installed."""

    model_config = ConfigDict(frozen=True)

    name: str
    group: Group
    entry_point_group: str
    package: str | None
    version: str | None
    target: str
    loads: bool
    error: str | None = None
    # False when another entry point of the same name wins (the registry takes the last).
    active: bool = True


def one_line(error: BaseException) -> str:
    """An error as one short line: its type and the first line of its message."""
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    line = f"{type(error).__name__}: {first}" if first else type(error).__name__
    return line[:_MAX_ERROR_CHARS]


def _try_load(load: EntryPoint) -> str | None:
    """None when the target imports and resolves, else why not (one line)."""
    try:
        load.load()
    except (Exception, SystemExit) as error:  # a plugin's import may raise anything
        return one_line(error)
    return None


def _from_entry_point(group: Group, ep_group: str, ep: EntryPoint) -> Extension:
    dist = ep.dist
    error = _try_load(ep)
    return Extension(
        name=ep.name,
        group=group,
        entry_point_group=ep_group,
        package=dist.name if dist is not None else None,
        version=dist.version if dist is not None else None,
        target=ep.value,
        loads=error is None,
        error=error,
    )


def _builtin(group: Group, ep_group: str, name: str, target: str) -> Extension:
    error = _try_load(EntryPoint(name=name, value=target, group=ep_group))
    return Extension(
        name=name,
        group=group,
        entry_point_group=ep_group,
        package="turnkeeper",
        version=__version__,
        target=target,
        loads=error is None,
        error=error,
    )


def list_extensions() -> list[Extension]:
    """Every installed extension, hosts first, each group by name.

    A built-in the installed metadata does not declare (a source checkout that was
    never installed) is listed as the registry would find it.
    """
    found: list[Extension] = []
    for group, ep_group, builtins in _GROUPS:
        listed = [_from_entry_point(group, ep_group, ep) for ep in entry_points(group=ep_group)]
        names = {ext.name for ext in listed}
        listed += [
            _builtin(group, ep_group, name, target)
            for name, target in builtins.items()
            if name not in names
        ]
        # The registry reads entry points in order and the last of a name wins.
        last = {ext.name: index for index, ext in enumerate(listed)}
        marked = [
            ext if last[ext.name] == index else ext.model_copy(update={"active": False})
            for index, ext in enumerate(listed)
        ]
        found += sorted(marked, key=lambda ext: (ext.name, not ext.active))
    return found

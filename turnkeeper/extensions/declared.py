"""Which extensions are installed, from package metadata alone.

``status`` shows each extension's states at every call, so it cannot import the
plugins (``turnkeeper extensions`` does, to say whether each loads) nor the hosts
package. Entry-point metadata names every installed extension with its package and
version in a few milliseconds.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from pydantic import BaseModel, ConfigDict

from turnkeeper.extensions.findings import Group

# The entry-point groups (the registries' ENTRY_POINT_GROUPs; a test keeps them equal).
GROUPS: tuple[tuple[Group, str], ...] = (
    ("host", "turnkeeper.hosts"),
    ("effect", "turnkeeper.effects"),
)


class Declared(BaseModel):
    """An extension as its package metadata declares it, without importing it."""

    model_config = ConfigDict(frozen=True)

    name: str
    group: Group
    package: str | None
    version: str | None


def declared_extensions() -> list[Declared]:
    """Every installed extension's name and package, hosts first, each group by name.

    A source checkout that was never installed declares no entry points of its own:
    its built-ins are then read from the registries, as they would be found."""
    found: dict[tuple[Group, str], Declared] = {}
    for group, ep_group in GROUPS:
        for ep in entry_points(group=ep_group):  # the last of a name wins, as when loaded
            dist = ep.dist
            found[(group, ep.name)] = Declared(
                name=ep.name,
                group=group,
                package=dist.name if dist is not None else None,
                version=dist.version if dist is not None else None,
            )
    if not any(d.package == "turnkeeper" for d in found.values()):
        for builtin in _builtins():
            found.setdefault((builtin.group, builtin.name), builtin)
    return sorted(found.values(), key=lambda d: (d.group != "host", d.name))


def _builtins() -> list[Declared]:
    from turnkeeper import __version__
    from turnkeeper.effects.registry import BUILTINS as EFFECTS
    from turnkeeper.hosts.registry import BUILTINS as HOSTS

    listed: list[tuple[Group, dict[str, str]]] = [("host", HOSTS), ("effect", EFFECTS)]
    return [
        Declared(name=name, group=group, package="turnkeeper", version=__version__)
        for group, names in listed
        for name in names
    ]

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
    # One scan of every distribution's entry points for both groups, and each
    # distribution's METADATA parsed once (``dist.name`` and ``dist.version`` each parse
    # it again): 14 metadata reads were half of what ``status`` spent here.
    installed = entry_points()
    packages: dict[int, tuple[str, str]] = {}  # by id: ``installed`` keeps each dist alive
    for group, ep_group in GROUPS:
        for ep in installed.select(group=ep_group):  # the last of a name wins, as loaded
            dist = ep.dist
            package: str | None = None
            version: str | None = None
            if dist is not None:
                if id(dist) not in packages:
                    metadata = dist.metadata
                    packages[id(dist)] = (metadata["Name"], metadata["Version"])
                package, version = packages[id(dist)]
            found[(group, ep.name)] = Declared(
                name=ep.name, group=group, package=package, version=version
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

"""The metadata-only listing ``status`` uses names what loading every entry point finds."""

from __future__ import annotations

from turnkeeper.effects import registry as effects_registry
from turnkeeper.extensions.catalog import list_extensions
from turnkeeper.extensions.declared import GROUPS, declared_extensions
from turnkeeper.hosts import registry as hosts_registry


def test_the_groups_are_the_registries() -> None:
    assert dict(GROUPS) == {
        "host": hosts_registry.ENTRY_POINT_GROUP,
        "effect": effects_registry.ENTRY_POINT_GROUP,
    }


def test_declared_names_what_the_catalog_loads() -> None:
    loaded = {(e.group, e.name, e.package, e.version) for e in list_extensions() if e.active}
    declared = {(d.group, d.name, d.package, d.version) for d in declared_extensions()}
    assert declared == loaded
    assert ("host", "subprocess") in {(g, n) for g, n, _, _ in declared}

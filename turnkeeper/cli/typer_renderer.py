"""Typer's help renderer, imported without the two modules turnkeeper never uses there.

Typer draws help and error panels in ``typer.rich_utils``, which imports at module level
``rich.markdown`` (with ``markdown_it``: for the markdown markup mode) and
``rich.traceback`` (for pretty tracebacks, which turnkeeper turns off). turnkeeper draws
in the "rich" markup mode, yet importing those two was about a third of
``turnkeeper --help``: ~40 ms of ~125 ms here (``python -X importtime``).

:func:`import_typer_renderer` imports ``typer.rich_utils`` with each of the two modules
stood in for by a placeholder whose one class imports the real module when first used
(instantiated, or a class attribute read). The placeholders leave ``sys.modules`` as
soon as Typer's module is imported, so anything that imports ``rich.markdown`` or
``rich.traceback`` afterwards gets the real module. Help is still drawn by Typer's own
code: the output cannot differ (``tests/cli/test_typer_renderer.py`` checks it does not,
and that markdown mode and tracebacks still work).
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

# (module, the one name typer.rich_utils imports from it)
_DEFERRED = (("rich.markdown", "Markdown"), ("rich.traceback", "Traceback"))
_RENDERER = "typer.rich_utils"


class _ImportedOnUse(type):
    """A stand-in class: calling it, or reading any class attribute (such as
    ``Traceback.from_exception``), imports the real module and uses its class."""

    module: str
    name: str

    def real(cls) -> type:
        found: type = getattr(importlib.import_module(cls.module), cls.name)
        return found

    def __getattr__(cls, attribute: str) -> object:
        return getattr(cls.real(), attribute)

    def __call__(cls, *args: object, **kwargs: object) -> object:
        return cls.real()(*args, **kwargs)


def _placeholder(module: str, name: str) -> ModuleType:
    placeholder = ModuleType(module, f"stands in for {module} while {_RENDERER} is imported")
    stand_in = _ImportedOnUse(name, (), {"module": module, "name": name})
    setattr(placeholder, name, stand_in)
    return placeholder


def import_typer_renderer() -> ModuleType:
    """``typer.rich_utils``, imported (once) without importing ``rich.markdown`` and
    ``rich.traceback``; where either is imported already, Typer's module gets it."""
    if _RENDERER in sys.modules:
        return sys.modules[_RENDERER]
    placed = [(m, n) for m, n in _DEFERRED if m not in sys.modules]
    for module, name in placed:
        # In sys.modules only, never set on the ``rich`` package: `import rich.markdown`
        # after this imports the real module and sets the attribute itself.
        sys.modules[module] = _placeholder(module, name)
    try:
        from typer import rich_utils

        return rich_utils
    finally:
        for module, _ in placed:
            del sys.modules[module]


def asks_for_help(args: list[str]) -> bool:
    """Whether a command line will print help (it may: an option's value can be
    ``--help``, which costs the import and changes nothing)."""
    return not args or "--help" in args

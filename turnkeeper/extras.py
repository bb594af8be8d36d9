"""The package's optional parts (its extras), and what a command says when one is missing.

The core — the embedded SQLite store, the CLI, ``run`` and its hosts — installs without
them. ``turnkeeper serve`` needs the ``server`` extra, a ``postgresql://`` store the
``postgres`` extra (pyproject.toml). Their modules are imported only where those
features start, inside :func:`needs_extra`, so an absent one ends the command with a
typed error that names the install command, never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from turnkeeper.errors import FailedPrecondition

# The top-level modules each extra brings (the import names of its distributions and of
# the ones they pull in that turnkeeper imports itself).
EXTRA_MODULES: Final[dict[str, frozenset[str]]] = {
    "server": frozenset({"fastapi", "starlette", "uvicorn", "jinja2", "prometheus_client"}),
    "postgres": frozenset({"psycopg", "psycopg_binary"}),
}


def missing_extra(extra: str, feature: str) -> FailedPrecondition:
    """FAILED_PRECONDITION: ``feature`` needs ``extra``, which is not installed."""
    command = f"pip install 'turnkeeper[{extra}]'"
    return FailedPrecondition(
        f"{feature} needs the {extra} extra: {command}",
        reason="missing_extra",
        details={"extra": extra, "feature": feature, "install": command},
    )


@contextmanager
def needs_extra(extra: str, feature: str) -> Iterator[None]:
    """Wrap the imports that start ``feature``: a module of ``extra`` that is absent
    raises :func:`missing_extra`. Any other ImportError (one of turnkeeper's own
    modules, a module of another package) is a fault, and goes on as it is."""
    try:
        yield
    except ImportError as exc:
        top = (exc.name or "").partition(".")[0]
        if top not in EXTRA_MODULES[extra]:
            raise
        raise missing_extra(extra, feature) from None
